"""What the anatomy of a step costs (tui_app/engine/anatomy.py). Off: the decoder's four marks a
decode step (a shared null context each) timed alone, as a share of the step. On: the mean decode
step inside a profiled window ÷ the mean of the same run's steps after it, windows and plain runs
interleaved in one process, for the plain model and int8 (whose lean step hooks each projection).

    .venv/bin/python benchmarks/engine/anatomy_cost.py [--rounds 3] [--steps 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.events import Anatomy, Step
from tui_app.commands.bench import apply_levers
from tui_app.engine.anatomy import no_mark
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import Profile, RunRequest


def marks_ns() -> float:
    def step() -> None:
        with no_mark("tt.step"):
            with no_mark("tt.forward"):
                pass
            with no_mark("tt.sampling"):
                pass
            with no_mark("tt.host_read"):
                pass

    n = 200_000
    return min(timeit.repeat(step, number=n, repeat=5)) / n * 1e9


def setup(doc: str, windows: int):
    """(options, the default model's engine, its events, a request of `windows` windows of decode steps and two more)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    events: list = []
    engine = Engine(EngineConfig(), events.append)
    engine.load()
    return args, engine, events, RunRequest(prompt="Tell me about the sea.", max_new_tokens=windows * args.steps + 2, ignore_eos=True)


def main() -> int:
    args, engine, events, req = setup(__doc__, 2)
    off_ns = marks_ns()
    print(f"off: the four marks of a step take {off_ns:.0f} ns")
    with tempfile.TemporaryDirectory() as tmp:
        for quant in ("off", "int8"):
            apply_levers(engine, {"quant": quant})
            engine.run(req)  # warm
            ratios, plain_ms = [], []
            for k in range(args.rounds):
                events.clear()
                engine.command(Profile(os.path.join(tmp, f"{quant}-{k}.json"), args.steps))
                engine.run(req)
                (an,) = [e for e in events if isinstance(e, Anatomy)]
                decode = [e.compute_ns / 1e6 for e in events if isinstance(e, Step) and e.kind == "decode"]
                after = statistics.mean(decode[args.steps + 1 :])  # the run's steps after the window
                ratios.append(an.step_ms / after)
                plain_ms.append(after)
            step = statistics.mean(plain_ms)
            print(
                f"quant {quant}: step {step:.2f} ms; profiled ÷ plain {statistics.mean(ratios):.3f} "
                f"({', '.join(f'{r:.3f}' for r in ratios)}); the marks while off: {off_ns / 1e6 / step:.4%} of a step"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
