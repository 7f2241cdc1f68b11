"""Weight-only int8 and int4 for CPU: packed weights, fp activations (rounded to int16 per token
inside the kernels).

Why our own module rather than torchao's Int8WeightOnly on CPU (measured on the default model,
one thread, `benchmarks/engine/ceiling.py`): decode is memory-bound, and what matters is the bytes read
per token and how fast a kernel streams them.
- torchao's CPU path (and aten's `_weight_int8pack_mm`, 1-2 GB/s here) ran at fp32's speed
  eager and 27 tok/s compiled; the tied LM head, a fifth of the model, had to stay fp32 (113 MB
  read per token) because its int8 form halved the speed.
- Here every fp32 call goes to our C++ kernel (kernels/int8_linear.cpp, built once per machine
  by native.py), which streams the int8 weights at 17-20 GB/s where widening them to fp32 and
  multiplying was compute-bound at ~7.5 G weights/s: int8 decode 28 -> 69 tok/s eager, 54 -> 92
  compiled, LM head int8 too. Prefill too (since 5a79cd8): the tiled kernels, four tokens per pass
  over weights that stay in L1, beat widening the weights for MKL at every length measured (8 to
  512 tokens, 3-8x) and even MKL's fp32 GEMM on the original weights (2-3x), so the prefill
  computes what decode does (the same rounded activations) and faster.
- int4 the same way (kernels/int4_linear.cpp): 8 -> 53 tok/s eager, 88 compiled (torchao's int4 -> ours);
  its tiled form on huge pages (587180b, 99d6b5c): 72 eager, 146 compiled. int8 tiled too (63f320c),
  int16 activations in both again: int8 58 eager, 118 compiled; int4 78 and 145 (ceiling.py).
- Each kernel has a body per kind of CPU (kernels/isa.h): AVX-512 VNNI's, AVX2's and a generic
  one, over the same packed tiles. Without a C++ compiler the kernels are skipped (the reason is
  shown): int8 calls are widened, int4 goes to torchao.
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch

from . import native, pages
from .experts import replace_experts

GROUP = 32  # int4 weights per scale and min
TILE = 16  # rows stored together: one per int32 lane of the VNNI kernels' AVX-512 vectors
QUAD = 4  # int8 weights of a row side by side in a tile: one int32 lane's worth
NIBBLES = TILE * GROUP // 2  # bytes of a tile's group of weights, followed by its rows' fp16 scales and mins
CHUNK_ELEMENTS = 1 << 19  # 2 MB of fp32 per widened chunk: it stays in the cache while it is used


_scratch: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _scratch_view(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A `shape` view of one buffer shared by every layer, for widened weights: a fresh 2 MB tensor
    per chunk is fresh pages from the kernel each time, and faulting them in cost 20x the widening."""
    buf = _scratch.get((dtype, device))
    if buf is None:
        with torch.inference_mode(False):  # a normal tensor may be written in and out of inference mode
            buf = _scratch[(dtype, device)] = torch.empty(CHUNK_ELEMENTS, dtype=dtype, device=device)
    return buf[: math.prod(shape)].view(shape)


def _frozen(t: torch.Tensor) -> torch.nn.Parameter:
    """Packed weights are parameters, not buffers: dynamo checks every buffer of a compiled step
    against every other for aliasing on each call, and parameters are exempt. Measured on the
    default model's int8 step: 1.6 ms of guards per token as buffers, 0.3 as parameters."""
    return torch.nn.Parameter(t, requires_grad=False)


class _QuantLinear(torch.nn.Module):
    """A linear layer over packed weights: fp32 inputs go to the C++ kernel where it is built;
    otherwise (no kernel, other dtypes) the weights are widened, row chunk by row chunk when eager.
    Its packed tensors (named in `packs`) are its own, or slices of a model-wide pool (_pool)."""

    packs: tuple[str, ...] = ()

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None, kernel: bool):
        super().__init__()
        self.bias = bias
        self.in_features, self.out_features = in_features, out_features
        width = -(-in_features // QUAD) * QUAD  # a widened chunk holds int8 rows with their padding
        self.rows = max(TILE, CHUNK_ELEMENTS // max(width, 1) // TILE * TILE)  # whole tiles per chunk
        self.kernel = kernel
        self.pooled: dict[str, tuple[int, tuple[int, ...]]] = {}  # name -> (start, shape) in the pool

    def _w(self, name: str) -> torch.Tensor:
        t = getattr(self, name)
        if name not in self.pooled:
            return t
        start, shape = self.pooled[name]
        return t[start : start + math.prod(shape)].view(shape)

    def nbytes(self) -> int:
        """Bytes of this layer's packed weights, its slices of the pools included."""
        return sum((math.prod(self.pooled[n][1]) if n in self.pooled else getattr(self, n).numel()) * getattr(self, n).element_size() for n in self.packs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and x.dtype == torch.float32:
            return self._kernel(x)
        if torch.compiler.is_compiling():
            y = self._product(x, 0, self.out_features, scratch=False)
        else:
            y = torch.cat([self._product(x, i, min(i + self.rows, self.out_features), scratch=True) for i in range(0, self.out_features, self.rows)], dim=-1)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.fmt}"


class Int8Linear(_QuantLinear):
    """Symmetric int8, one scale per output row: w = scale * q, q in -127..127.
    Stored as the kernel reads them (kernels/int8_linear.cpp): TILE rows at a time, each 64 bytes
    four weights of each of the tile's rows, as q + 128 (the kernel's multiply wants them unsigned);
    rows padded to whole tiles, and each row to whole fours, with q = 0."""

    fmt = "int8 per-channel"
    packs = ("qweight", "scale")

    def __init__(self, linear: torch.nn.Linear, kernel: bool = False):
        super().__init__(linear.in_features, linear.out_features, linear.bias, kernel)
        w = linear.weight.detach().float()
        peak = w.abs().amax(dim=1) if self.in_features else w.new_zeros(self.out_features)  # amax refuses an empty row
        scale = peak.clamp(min=1e-12) / 127
        q = ((w / scale[:, None]).round().clamp(-127, 127) + 128).to(torch.uint8)
        q = torch.nn.functional.pad(q, (0, -self.in_features % QUAD, 0, -self.out_features % TILE), value=128)
        tiles, quads = q.shape[0] // TILE, q.shape[1] // QUAD
        self.qweight = _frozen(q.view(tiles, TILE, quads, QUAD).transpose(1, 2).reshape(tiles, quads, TILE * QUAD))
        self.scale = _frozen(scale.to(linear.weight.dtype))

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tokentop.int8_linear(x, self._w("qweight"), self._w("scale"), self.out_features, self.bias)

    def _product(self, x: torch.Tensor, i: int, j: int, scratch: bool) -> torch.Tensor:
        p = self._w("qweight")[i // TILE : -(-j // TILE)]  # i is a whole number of tiles
        tiles, quads = p.shape[:2]
        q = p.view(tiles, quads, TILE, QUAD).transpose(1, 2)
        w = _scratch_view(q.shape, x.dtype, q.device).copy_(q) if scratch else q.to(x.dtype)
        w = w.reshape(tiles * TILE, quads * QUAD)[: j - i, : self.in_features].sub_(128)
        return (x @ w.t()) * self._w("scale")[i:j]  # the row scale once per output, not per weight


class Int4Linear(_QuantLinear):
    """Asymmetric int4 in groups of GROUP along each row: w = scale * q + min, q in 0..15, both
    per group and fp16: the values of the GGUF's Q4_1, so the default model's weights land on their own grid.
    Stored as the kernel reads them (kernels/int4_linear.cpp): TILE rows at a time, each group of
    the tile's rows one run of 320 bytes, their nibbles, then their scales and mins; a last tile
    short of TILE rows is padded with zero rows that no output shows."""

    fmt = f"int4 g{GROUP} asymmetric"
    packs = ("packed",)

    def __init__(self, linear: torch.nn.Linear, kernel: bool = False):
        super().__init__(linear.in_features, linear.out_features, linear.bias, kernel)
        w = linear.weight.detach().float()
        g = w.view(self.out_features, self.in_features // GROUP, GROUP)
        # fp16 as in Q4_1: 4 bytes of scale and min per 32 weights instead of 8, a sixth of what a
        # decode step streams; the levels are chosen on the rounded grid.
        lo = g.amin(dim=-1).half()
        scale = ((g.amax(dim=-1) - lo.float()) / 15).half()
        q = ((g - lo.float()[..., None]) / scale.float()[..., None].clamp(min=1e-12)).round().clamp(0, 15).to(torch.uint8)
        tiles, groups, pad = -(-self.out_features // TILE), g.shape[1], -self.out_features % TILE
        q, scale, lo = (torch.nn.functional.pad(t, (0, 0) * (t.dim() - 1) + (0, pad)) for t in (q, scale, lo))
        half = GROUP // 2
        # byte 64 j + 4 r + t of a tile's group: weight 4 j + t of row r (low nibble), 16 + 4 j + t (high)
        nibbles = (q[..., :half] | (q[..., half:] << 4)).view(tiles, TILE, groups, 4, 4).permute(0, 2, 3, 1, 4)
        per_tile = [t.view(tiles, TILE, groups).transpose(1, 2).contiguous().view(torch.uint8) for t in (scale, lo)]
        self.packed = _frozen(torch.cat([nibbles.reshape(tiles, groups, NIBBLES), *per_tile], dim=-1))

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tokentop.int4_linear(x, self._w("packed"), self.out_features, self.bias)

    def _product(self, x: torch.Tensor, i: int, j: int, scratch: bool) -> torch.Tensor:
        p = self._w("packed")[i // TILE : -(-j // TILE)]  # i is a whole number of tiles
        tiles, groups = p.shape[:2]
        nibbles = p[..., :NIBBLES].reshape(tiles, groups, 4, TILE, 4).permute(0, 3, 1, 2, 4).reshape(tiles * TILE, groups, GROUP // 2)
        scale, mins = (p[..., k : k + 2 * TILE].view(torch.float16).transpose(1, 2).reshape(tiles * TILE, groups, 1) for k in (NIBBLES, NIBBLES + 2 * TILE))
        q = torch.cat([nibbles & 15, nibbles >> 4], dim=-1)[: j - i]
        w = _scratch_view(q.shape, x.dtype, q.device).copy_(q) if scratch else q.to(x.dtype)
        w.mul_(scale[: j - i].to(x.dtype)).add_(mins[: j - i].to(x.dtype))
        return x @ w.view(j - i, self.in_features).t()


def _replace_linears(model: torch.nn.Module, make) -> torch.nn.Module:
    """Every nn.Linear of `model` and each expert of an MoE's 3-D experts (experts.py), in place."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, make(child))
    return replace_experts(model, make)


def _pool(model: torch.nn.Module) -> torch.nn.Module:
    """Move each packed tensor of every quantized layer of one kind into one flat parameter shared
    by those layers (in place), each layer keeping where its slice lies.

    Why: every tensor a compiled step takes costs on each call, whatever its size: dynamo fetches
    it from its module in Python, it is converted for inductor's C++ wrapper, whose code checks its
    sizes and strides; and as each step streams all the weights through the caches, all that
    metadata is out of cache again by the next step. Measured on the default model's compiled int4
    step (690 weight tensors -> 4): 8.43 -> 7.29 ms (the layers' slices are views made in the C++
    wrapper, on tensors it already holds). The pools lie on huge pages (pages.py)."""
    kinds: dict[type, list[_QuantLinear]] = {}
    for module in model.modules():
        if isinstance(module, _QuantLinear):
            kinds.setdefault(type(module), []).append(module)
    for layers in kinds.values():
        for name in layers[0].packs:
            parts = [getattr(layer, name) for layer in layers]
            flat = pages.empty(sum(p.numel() for p in parts) * parts[0].element_size()).view(parts[0].dtype)
            flat = _frozen(torch.cat([p.reshape(-1) for p in parts], out=flat))
            start = 0
            for layer, part in zip(layers, parts, strict=True):
                setattr(layer, name, flat)
                layer.pooled[name] = (start, tuple(part.shape))
                start += part.numel()
    return model


def joined(layers: list[torch.nn.Module]) -> _QuantLinear | None:
    """One layer whose output is `layers`' outputs side by side, where they are quantized layers of
    one kind without bias, on the same input size, each but the last filling its last tile, lying
    one after another in their pools (a decoder layer's q/k/v and its gate/up projections do:
    _pool keeps the model's order); else None.
    One kernel call instead of several, the activations rounded once: measured on the default
    model's compiled int4 step (q/k/v and gate/up joined), 7.52 -> 7.15 ms, the same logits."""
    first = layers[0]
    kind = type(first)
    if not isinstance(first, _QuantLinear) or any(
        type(layer) is not kind or layer.bias is not None or layer.in_features != first.in_features for layer in layers
    ):
        return None
    if any(layer.out_features % TILE for layer in layers[:-1]):  # padding rows would land inside the joint
        return None
    for name in first.packs:
        if any(name not in layer.pooled or getattr(layer, name) is not getattr(first, name) for layer in layers):
            return None
        spans = [layer.pooled[name] for layer in layers]  # (start, shape): each must end where the next starts
        if any(start + math.prod(shape) != following for (start, shape), (following, _) in pairwise(spans)):
            return None
    joint = kind.__new__(kind)
    _QuantLinear.__init__(joint, first.in_features, sum(layer.out_features for layer in layers), None, first.kernel)
    for name in first.packs:
        start, shape = first.pooled[name]
        setattr(joint, name, getattr(first, name))
        joint.pooled[name] = (start, (sum(layer.pooled[name][1][0] for layer in layers), *shape[1:]))
    return joint


def int8_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear of `model` (in place), the LM head included, becomes an Int8Linear.
    A tied LM head gets its own int8 copy; the embedding keeps its fp table (one row read per token)."""
    kernel = native.load("int8_linear") is None
    return _pool(_replace_linears(model, lambda linear: Int8Linear(linear, kernel)))


def int4_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear of `model` (in place) becomes an Int4Linear, except the LM head: int8, as
    its 4-bit form cost more perplexity than all the layers together (measured, docs/performance.md)."""
    int4, int8 = native.load("int4_linear") is None, native.load("int8_linear") is None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return _pool(_replace_linears(model, lambda linear: Int8Linear(linear, int8) if linear is head else Int4Linear(linear, int4)))
