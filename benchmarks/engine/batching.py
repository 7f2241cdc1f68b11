"""The batch lever's trade on this machine: one sequence alone, then batches of distinct prompts
arriving during the run (the engine's continuous batching) and of the run's prompt replicated,
in turns on the default model: the whole batch's decode tok/s beside the first sequence's own
tok/s, ITL p50/p95 and TTFT (the RunTimer's figures, as the runs table and the KV pane show them).

    .venv/bin/python benchmarks/engine/batching.py [--rounds 2] [--tokens 64] [--sizes 4,8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.events import RunFinished
from tui_app.commands.bench import apply_levers
from tui_app.core.session import Session
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import RunRequest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--sizes", default="4,8")
    args = ap.parse_args()
    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    req = RunRequest(preset="short", max_new_tokens=args.tokens, ignore_eos=True)
    mixes = [("alone", 1, "distinct")] + [(f"{how} b{n}", n, how) for n in map(int, args.sizes.split(",")) for how in ("distinct", "replicated")]
    figures: dict[str, list[tuple[float, ...]]] = {name: [] for name, _, _ in mixes}
    engine.run(req)  # warm
    for _ in range(args.rounds):  # in turns: a drift in the machine's pace falls on every mix alike
        for name, size, how in mixes:
            engine.cfg.batch_prompts = how
            apply_levers(engine, {"batch": size})
            fin = engine.run(req)
            assert isinstance(fin, RunFinished)
            t = session.timer.runs[fin.run_id].total
            figures[name].append((t.decode_tps, t.decode_tokens / t.decode_s, t.itl.p50 * 1e3, t.itl.p95 * 1e3, t.ttft_s * 1e3))
    print(f"{args.rounds} rounds of {args.tokens} tokens, short prompt, {engine.threads} threads; medians over the rounds")
    print("mix | batch tok/s | first sequence tok/s | its ITL p50 ms | p95 ms | TTFT ms")
    for name, rows in figures.items():
        cols = [statistics.median(c) for c in zip(*rows, strict=True)]
        print(f"{name} | " + " | ".join(f"{v:.1f}" for v in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
