"""How fast the quantized kernels stream weights: each quantized variant's layers called once on one
token, as a decode step calls them (q/k/v and gate/up joined), all of them together far larger than
the caches, ÷ a plain read of the same bytes (torch's sum over the same tensors), alternating in one
process on one thread. The calls are made from Python, so the kernels' rate includes torch's op
dispatch (a few microseconds per call, ~120 calls); the ratio is a floor for the kernels alone.

Beside ours, what torch itself ships for weight-only int8 and int4 on a CPU, on the same layers:
`_weight_int8pack_mm` (int8 rows, one scale each) and `_weight_int4pack_mm_for_cpu` (groups of 32,
a scale and a zero each, tinygemm's packing), which ATen builds for AVX2, AVX-512 and NEON alike.
Their vectorized paths take bf16 activations (fp32 ones fall to a scalar loop), so they get bf16;
and fp32's own linear over the original weights. Weights per second is the figure that compares
formats: a format that reads fewer bytes per weight can afford more work per weight.

    .venv/bin/python benchmarks/engine/kernel_stream.py [--rounds 15]
    TOKENTOP_CPU_KERNELS=portable ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/engine/kernel_stream.py   # as a CPU without AVX-512
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def step_layers(model) -> list:
    """The quantized layers in the order a lean decode step calls them, joined where it joins them."""
    from tui_app.engine.lean import LeanDecode

    lean = LeanDecode(model)
    calls = []
    for layer, joints in zip(lean.layers, lean.joints, strict=True):
        attn, mlp = layer.self_attn, layer.mlp
        if joints:
            calls += [joints[0], attn.o_proj, joints[1], mlp.down_proj]
        else:
            calls += [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return [*calls, lean.head]


def aten_calls(weights: list) -> dict:
    """torch's own int8 and int4 products, and fp32's linear, over the same layers' original weights."""
    import torch

    calls: dict[str, list] = {"aten int8, bf16 activations": [], "aten int4, bf16 activations": [], "fp32 linear": []}
    for w in weights:
        n, k = w.shape
        x32, x16 = torch.randn(1, k), torch.randn(1, k).bfloat16()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        q8 = (w / scale[:, None]).round().to(torch.int8)
        calls["aten int8, bf16 activations"].append((torch.ops.aten._weight_int8pack_mm, (x16, q8, scale.bfloat16()), n * k))
        g = w.view(n, k // 32, 32)
        lo, hi = g.amin(-1), g.amax(-1)
        s4 = ((hi - lo) / 15).clamp(min=1e-12)
        q4 = ((g - lo[..., None]) / s4[..., None]).round().clamp(0, 15).to(torch.int32).view(n, k)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q4, 1)
        zeros = lo + 8 * s4  # tinygemm's w = (q - 8) * scale + zero
        scales_zeros = torch.stack([s4.t(), zeros.t()], dim=-1).contiguous().bfloat16()
        calls["aten int4, bf16 activations"].append(
            (torch.ops.aten._weight_int4pack_mm_for_cpu, (x16, packed, 32, scales_zeros), packed.numel() + scales_zeros.numel() * 2)
        )
        calls["fp32 linear"].append((torch.nn.functional.linear, (x32, w), 4 * n * k))
    return calls


def fp_weights(model) -> list:
    """The fp32 weights [out, in] of step_layers' calls, in their order: joined parts side by side."""
    import torch

    weights = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        weights += [torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]), attn.o_proj.weight]
        weights += [torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight]
    return [w.detach() for w in [*weights, model.lm_head.weight]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    import torch

    from tui_app.core import fmt
    from tui_app.engine import native
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.levers import quantize

    torch.set_num_threads(1)
    engine = Engine(EngineConfig(threads=1), lambda ev: None)
    engine.load()
    print(f"our kernels: the {native.isa()} body; ATen's vector ISA: {torch.backends.cpu.get_cpu_capability()}\n")
    print("| weights | bytes | GB/s | G weights/s | read GB/s | ÷ read |\n|---|---|---|---|---|---|")
    for level in ("int8", "int4"):
        model = quantize(engine.model, level, "cpu", torch.float32)
        layers = step_layers(model)
        n_weights = sum(m.out_features * m.in_features for m in layers)
        pools = list({id(t): t for m in layers for t in (getattr(m, n) for n in m.packs)}.values())
        xs = {m.in_features: torch.randn(1, 1, m.in_features) for m in layers}
        candidates = {f"{level}, ours": ([(m._kernel, (xs[m.in_features],), 0) for m in layers], sum(t.numel() * t.element_size() for t in pools))}
        if level == "int8":  # torch's own, and fp32's, over the same weights: once, beside ours
            with torch.inference_mode():
                for name, calls in aten_calls(fp_weights(engine.model)).items():
                    candidates[name] = (calls, sum(b for _, _, b in calls))
        for name, (calls, size) in candidates.items():
            tensors = [t for _, a, _ in calls for t in a if isinstance(t, torch.Tensor) and t.numel() > 1 << 16] or pools
            words = [t.contiguous().view(-1).view(torch.uint8)[: t.numel() * t.element_size() // 8 * 8].view(torch.int64) for t in tensors]
            timings: dict[str, list[float]] = {"calls": [], "read": []}
            with torch.inference_mode():
                for rnd in range(args.rounds + 1):  # round 0 warms up
                    t = time.perf_counter()
                    for fn, a, _ in calls:
                        fn(*a)
                    took = time.perf_counter() - t
                    t = time.perf_counter()
                    for w in words:
                        w.sum()
                    read = time.perf_counter() - t
                    if rnd:
                        timings["calls"].append(took)
                        timings["read"].append(read)
            k, r = (statistics.median(timings[n]) for n in ("calls", "read"))
            rate, read_rate = size / k, sum(w.numel() * 8 for w in words) / r
            print(f"| {name} | {fmt.nbytes(size)} | {rate / 1e9:.1f} | {n_weights / k / 1e9:.1f} | {read_rate / 1e9:.1f} | {rate / read_rate:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
