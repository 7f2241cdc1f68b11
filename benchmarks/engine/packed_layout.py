"""Why the packed int8/int4 weights are laid out as they are: a compiled decode step of the default
model over three layouts of the same weights, alternating in one process.
- pooled, joined: each packed kind of all layers in one parameter, each layer a slice of it, and
  a decoder layer's q/k/v and gate/up each one kernel call over their adjacent slices (the engine's).
- pooled: the same, one call per layer.
- per-layer parameters: each layer its own tensors (up to baa405c).
- per-layer buffers (up to a348682): dynamo checks every buffer a compiled step reads against every
  other for aliasing before each call; parameters are exempt.
Every layout lies on the same page size (--pages): on huge pages the per-layer tensors are separate
tensors placed in one huge-page region, as the pools are; on small pages the pools are moved off
their huge pages. The page size alone moves the int4 step by a sixth (pages.py), so layouts on
different pages would measure the pages, not the layout.

    .venv/bin/python benchmarks/engine/packed_layout.py [--quant int8|int4] [--pages huge|small] [--rounds 6] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def per_layer(model, buffers: bool, huge: bool) -> None:
    """Give each quantized layer its own copy of its slices, as parameters or as buffers: on huge
    pages, each its own tensor (its own storage, as a clone is) over one region, as the pools lie."""
    import torch

    from tui_app.engine import pages
    from tui_app.engine.quant import _QuantLinear

    parts = [(m, name, m._w(name)) for m in model.modules() if isinstance(m, _QuantLinear) for name in m.packs]
    starts, end = [], 0
    for _, _, t in parts:
        starts.append(end)
        end += -(-t.numel() * t.element_size() // 64) * 64
    region = pages.empty(end).numpy() if huge else None
    for (m, name, t), start in zip(parts, starts, strict=True):
        if huge:
            own = torch.frombuffer(region[start : start + t.numel() * t.element_size()], dtype=torch.uint8).view(t.dtype).view(t.shape).copy_(t)
        else:
            own = t.clone()
        delattr(m, name)
        m.pooled.pop(name, None)
        if buffers:
            m.register_buffer(name, own)
        else:
            setattr(m, name, torch.nn.Parameter(own, requires_grad=False))


def pools_on_small_pages(model) -> None:
    """Move the pools (quant._pool, on huge pages) to plain memory, in place: every layer keeps its slice."""
    import torch

    from tui_app.engine.quant import _QuantLinear

    pools = {id(getattr(m, name)): getattr(m, name) for m in model.modules() if isinstance(m, _QuantLinear) for name in m.pooled}
    with torch.inference_mode(False), torch.no_grad():
        for p in pools.values():
            p.data = p.data.clone()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quant", choices=["int8", "int4"], default="int8")
    ap.add_argument("--pages", choices=["huge", "small"], default="huge", help="the page size every layout lies on")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    import torch
    from transformers import StaticCache

    from tui_app.engine import lean as lean_module
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.levers import quantize

    engine = Engine(EngineConfig(threads=1), lambda ev: None)
    engine.load()
    engine.set_lever("quant", args.quant)
    models = {"pooled, joined": engine.control.variants[args.quant], "pooled": engine.control.variants[args.quant]}
    if args.pages == "small":
        pools_on_small_pages(models["pooled"])
    for name, buffers in (("per-layer parameters", False), ("per-layer buffers", True)):
        models[name] = quantize(engine.model, args.quant, "cpu", torch.float32)
        per_layer(models[name], buffers, huge=args.pages == "huge")
    engine.control.compiled_fn(models["pooled"], args.quant)  # sets the engine's inductor options for a CPU step
    steps = {}
    for name, model in models.items():
        # Each variant gets its own copy of the step's code, so each has its own dynamo cache, as
        # the engine's variants would if only one existed.
        code = lean_module.LeanDecode.static_step.__code__.replace(co_name="static_step_" + "".join(c if c.isalnum() else "_" for c in name))
        lean = lean_module.LeanDecode(model)
        lean.own_attention = lean_module.use_own_attention(model)  # as the engine's compiled step
        if name == "pooled":
            lean.joints = [None] * len(lean.joints)
        steps[name] = torch.compile(types.MethodType(types.FunctionType(code, vars(lean_module)), lean), dynamic=False)
    tok = torch.zeros((1, 1), dtype=torch.long)
    times: dict[str, list[float]] = {name: [] for name in steps}
    with torch.inference_mode():
        for rnd in range(args.rounds + 1):  # round 0 compiles
            for name, fn in steps.items():
                model = models[name]
                cache = StaticCache(config=model.config, max_cache_len=256)
                torch.compiler.set_stance("default")
                engine.decoder.forward(model, tok, cache, 0)  # eager first write, as a prefill does
                fn(tok, cache, torch.full((1, 1), 1))
                torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)  # as the engine's warm steps
                t = time.perf_counter()
                for pos in range(2, 2 + args.tokens):
                    fn(tok, cache, torch.full((1, 1), pos))
                if rnd:
                    times[name].append((time.perf_counter() - t) / args.tokens)
    torch.compiler.set_stance("default")
    print(f"\n{args.quant} + compile, default model, 1 thread, every layout on {args.pages} pages, {args.tokens} steps × {args.rounds} rounds each\n")
    print("| packed weights | ms/step, median | min | per round |\n|---|---|---|---|")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v) * 1e3:.2f} | {min(v) * 1e3:.2f} | {', '.join(f'{x * 1e3:.2f}' for x in v)} |")
    med = {name: statistics.median(v) for name, v in times.items()}
    print(
        f"\npooled, joined ÷ pooled: {med['pooled, joined'] / med['pooled']:.2f}; "
        f"pooled ÷ per-layer parameters: {med['pooled'] / med['per-layer parameters']:.2f}; "
        f"per-layer parameters ÷ buffers: {med['per-layer parameters'] / med['per-layer buffers']:.2f} (medians)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
