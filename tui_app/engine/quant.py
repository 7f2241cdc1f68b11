"""Weight-only int8 for CPU: per-output-channel symmetric int8 weights, fp activations.

Why our own module rather than torchao's Int8WeightOnly on CPU (measured on the default model,
one thread, `benchmarks/ceiling.py`): decode is memory-bound, and what matters is the bytes read
per token and how fast a kernel streams them.
- torchao's CPU path (and aten's `_weight_int8pack_mm`, 1-2 GB/s here) ran at fp32's speed
  eager and 27 tok/s compiled; the tied LM head, a fifth of the model, had to stay fp32 (113 MB
  read per token) because its int8 form halved the speed.
- Here up to KERNEL_TOKENS tokens per call go to our C++ kernel (kernels/int8_linear.cpp, built
  once per machine by native.py), which streams the int8 weights at 17-20 GB/s where widening
  them to fp32 and multiplying was compute-bound at ~7.5 G weights/s: int8 decode 28 -> 63 tok/s
  eager, 54 -> 85 compiled, LM head int8 too. Longer inputs (prefill) are compute-bound; there
  each weight is widened to fp in row chunks that stay in the cache, for MKL's GEMM.
- Without a C++ compiler the kernel is skipped (the reason is shown) and every call is widened.
"""

from __future__ import annotations

import torch

from . import native

# Below this many tokens per call the C++ kernel (kernels/int8_linear.cpp) beats widening the
# weights for MKL (measured, 1536x576 and 49152x576 layers: 4.9x at 1 token, 1.5x at 16, a tie at
# 32-64); prefill beyond it is compute-bound, where MKL's fp32 GEMM is the faster engine.
KERNEL_TOKENS = 32
CHUNK_ELEMENTS = 1 << 19  # 2 MB of fp32 per widened chunk: it stays in the cache while it is used


_scratch: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _widen(chunk: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`chunk` in `dtype`, written into one buffer shared by every layer: a fresh 2 MB tensor per
    chunk is fresh pages from the kernel each time, and faulting them in cost 20x the conversion."""
    buf = _scratch.get((dtype, chunk.device))
    if buf is None:
        with torch.inference_mode(False):  # a normal tensor may be written in and out of inference mode
            buf = _scratch[(dtype, chunk.device)] = torch.empty(CHUNK_ELEMENTS, dtype=dtype, device=chunk.device)
    return buf[:chunk.numel()].view(chunk.shape).copy_(chunk)


class Int8Linear(torch.nn.Module):
    def __init__(self, linear: torch.nn.Linear, kernel: bool = False):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("qweight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.rows = max(1, CHUNK_ELEMENTS // self.in_features)
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and x.dtype == torch.float32 and x.numel() < KERNEL_TOKENS * self.in_features:
            return torch.ops.tokentop.int8_linear(x, self.qweight, self.scale, self.bias)
        if torch.compiler.is_compiling():
            y = x @ self.qweight.to(x.dtype).t()
        else:
            y = torch.cat([x @ _widen(self.qweight[i:i + self.rows], x.dtype).t()
                           for i in range(0, self.out_features, self.rows)], dim=-1)
        y = y * self.scale
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def int8_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear of `model` (in place), the LM head included, becomes an Int8Linear.
    A tied LM head gets its own int8 copy; the embedding keeps its fp table (one row read per token)."""
    kernel = native.load("int8_linear") is None
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Int8Linear(child, kernel))
    return model
