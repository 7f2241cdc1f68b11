"""Weight-only int8 for CPU: per-output-channel symmetric int8 weights, fp activations.

Why our own module rather than torchao's Int8WeightOnly on CPU (measured on the default model,
one thread, `benchmarks/ceiling.py`): decode is memory-bound, and what matters is the bytes read
per token and how fast a kernel streams them.
- torchao's CPU path (and aten's `_weight_int8pack_mm`, 1-2 GB/s here) ran at fp32's speed
  eager and 27 tok/s compiled; the tied LM head, a fifth of the model, had to stay fp32 (113 MB
  read per token) because its int8 form halved the speed.
- Here, compiled, a one-token step becomes a multiply-and-sum over the int8 weight that inductor
  fuses into one streaming reduction (no fp copy of the weight is ever made): 54 tok/s with the
  LM head int8 too. Eager, each weight is widened to fp in row chunks that stay in the
  cache (a whole-matrix copy of the LM head cost 74 ms; chunks of 2 MB, 5 ms; fp32's GEMV, 10 ms).
"""

from __future__ import annotations

import torch

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
    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("qweight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.rows = max(1, CHUNK_ELEMENTS // self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            if x.shape[-2] == 1:
                # Written as a reduction, inductor widens each weight as it streams it; as a matmul
                # (even with its mem-bound mm rewrite) it widened the whole matrix first: 13 tok/s.
                y = (x.unsqueeze(-2) * self.qweight.to(x.dtype)).sum(-1)
            else:
                y = x @ self.qweight.to(x.dtype).t()
        else:
            y = self._chunked(x)
        y = y * self.scale
        return y if self.bias is None else y + self.bias

    def _chunked(self, x: torch.Tensor) -> torch.Tensor:
        threads = torch.get_num_threads()
        if threads > 1 and x.shape[-2] == 1:
            # One token per row: with two threads, torch's parallel widening and MKL's threads took
            # turns spinning on the two cores (each widening 13x slower: int8 eager fell from 30 to
            # 7 tok/s); the chunks are small and cache-resident, so one thread does them fastest.
            torch.set_num_threads(1)
        try:
            return torch.cat([x @ _widen(self.qweight[i:i + self.rows], x.dtype).t()
                              for i in range(0, self.out_features, self.rows)], dim=-1)
        finally:
            torch.set_num_threads(threads)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def int8_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear of `model` (in place), the LM head included, becomes an Int8Linear.
    A tied LM head gets its own int8 copy; the embedding keeps its fp table (one row read per token)."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Int8Linear(child))
    return model
