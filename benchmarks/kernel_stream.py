"""How fast the quantized kernels stream weights: each quantized variant's layers called once on one
token, as a decode step calls them (q/k/v and gate/up joined), all of them together far larger than
the caches, ÷ a plain read of the same bytes (torch's sum over the same tensors), alternating in one
process on one thread. The calls are made from Python, so the kernels' rate includes torch's op
dispatch (a few microseconds per call, ~120 calls); the ratio is a floor for the kernels alone.

    .venv/bin/python benchmarks/kernel_stream.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    import torch

    from tui_app.core import fmt
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.levers import quantize

    torch.set_num_threads(1)
    engine = Engine(EngineConfig(threads=1), lambda ev: None)
    engine.load()
    print("| weights | bytes | kernels GB/s | read GB/s | kernels ÷ read |\n|---|---|---|---|---|")
    for level in ("int8", "int4"):
        model = quantize(engine.model, level, "cpu", torch.float32)
        layers = step_layers(model)
        pools = list({id(t): t for m in layers for t in (getattr(m, n) for n in m.packs)}.values())
        size = sum(t.numel() * t.element_size() for t in pools)
        words = [t.view(torch.uint8).view(torch.int64) for t in pools]  # whole 8-byte words: every pool's size is a multiple of 8
        xs = {m.in_features: torch.randn(1, 1, m.in_features) for m in layers}
        timings: dict[str, list[float]] = {"kernels": [], "read": []}
        with torch.inference_mode():
            for rnd in range(args.rounds + 1):  # round 0 warms up
                t = time.perf_counter()
                for m in layers:
                    m._kernel(xs[m.in_features])
                kernels = time.perf_counter() - t
                t = time.perf_counter()
                for w in words:
                    w.sum()
                read = time.perf_counter() - t
                if rnd:
                    timings["kernels"].append(kernels)
                    timings["read"].append(read)
        k, r = (size / statistics.median(timings[n]) / 1e9 for n in ("kernels", "read"))
        print(f"| {level} | {fmt.nbytes(size)} | {k:.1f} | {r:.1f} | {k / r:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
