"""Each lever's anatomy beside the plain one, in one process: what compile does to the framework
share (the step outside the model's parts) and to the share outside torch's ops, what int8 and
int4 do to the projections (attention and the MLP, where the quantized layers are). Each mix is
warmed by a run (compile's graphs are built there), then profiled `--rounds` times, `--steps`
decode steps a window; the means are printed side by side, with the unprofiled step of the same
runs (their decode steps after the window) and the roofline's share outside the ops on it.

    .venv/bin/python benchmarks/engine/anatomy_levers.py [--rounds 3] [--steps 16]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.engine.anatomy_cost import setup
from monitors.events import Anatomy, Step
from tui_app.commands.bench import apply_levers
from tui_app.requests import Profile, RunRequest

MIXES = {
    "plain": {},
    "compile": {"compile": True},
    "int8": {"quant": "int8"},
    "int4": {"quant": "int4"},
    "int4+compile": {"quant": "int4", "compile": True},
}


def window(engine, events: list, req: RunRequest, path: str, steps: int) -> tuple[Anatomy, float]:
    """One profiled window and the median of the same run's decode steps after it (ms)."""
    events.clear()
    engine.command(Profile(path, steps))
    engine.run(req)
    (an,) = [e for e in events if isinstance(e, Anatomy)]
    after = sorted(e.compute_ns / 1e6 for e in events if isinstance(e, Step) and e.kind == "decode")[steps + 1 :]
    return an, statistics.median(after)


def main() -> int:
    args, engine, events, req = setup(__doc__, 3)
    print(f"{'mix':<13} {'step ms':>8} {'profiled':>9} {'framework':>10} {'outside ops':>12} {'attn+MLP':>9} {'ops/step':>9}  the model's parts (ms a step)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, combo in MIXES.items():
            refused = apply_levers(engine, {"quant": "off", "compile": False, **combo})
            if refused:
                print(f"{name:<13} refused: {refused}")
                continue
            engine.run(req)  # warm: compile's graphs, the quantized weights' first touch
            got = [window(engine, events, req, os.path.join(tmp, f"{name}-{k}.json"), args.steps) for k in range(args.rounds)]
            step = statistics.mean(after for _, after in got)
            prof = statistics.mean(an.step_ms for an, _ in got)
            fw = statistics.mean(an.parts.get("framework", 0.0) / an.step_ms for an, _ in got)
            outside = statistics.mean(max(0.0, 1 - an.ops_ms / after) for an, after in got)
            proj = statistics.mean((an.parts.get("attention", 0.0) + an.parts.get("mlp", 0.0)) / an.step_ms for an, _ in got)
            ops = statistics.mean(an.ops for an, _ in got)
            parts = {k: statistics.mean(an.parts.get(k, 0.0) for an, _ in got) for k in got[-1][0].parts if k != "framework"}
            detail = ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if v >= 0.05)
            print(f"{name:<13} {step:>8.2f} {prof:>9.2f} {fw:>10.1%} {outside:>12.1%} {proj:>9.1%} {ops:>9.0f}  {detail}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
