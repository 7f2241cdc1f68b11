"""The sampler's cost: one sample (psutil for two processes + system + NVML), and decode speed of the
default model with the sampler thread running beside it ÷ without, alternated in one process.
Target ≥ 0.99.

    .venv/bin/python benchmarks/terminal/sampler_cost.py [--rounds 4] [--hz 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.sampler import Sampler
from tui_app.core.session import Session
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--hz", type=float, default=4.0)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    probe = Sampler()
    probe.watch("engine", os.getpid())
    costs = []
    for _ in range(200):
        costs.append(probe.sample_once().sample_cost_s)
    probe.stop()
    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    req = RunRequest(max_new_tokens=args.tokens, ignore_eos=True)
    engine.run(req)

    def tps() -> float:
        fin = engine.run(req)
        return session.timer.runs[fin.run_id].total.decode_tps

    without, with_ = [], []
    for _ in range(args.rounds):
        without.append(tps())
        s = Sampler(hz=args.hz)
        s.watch("engine", os.getpid())
        s.start()
        time.sleep(0.3)
        with_.append(tps())
        s.stop()
    c = statistics.median(costs) * 1000
    print(
        f"one sample (2 processes, system, NVML: {probe.gpu_reason or 'present'}): median {c:.2f} ms, "
        f"p95 {sorted(costs)[int(len(costs) * 0.95)] * 1000:.2f} ms → {c * args.hz / 10:.2f} % of a core at {args.hz:g} Hz\n"
    )
    print("| decode tok/s | median of rounds |\n|---|---|")
    print(f"| engine alone | {statistics.median(without):.2f} |")
    print(f"| with the sampler at {args.hz:g} Hz | {statistics.median(with_):.2f} |")
    print(f"| ratio (target ≥ 0.99) | {statistics.median(with_) / statistics.median(without):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
