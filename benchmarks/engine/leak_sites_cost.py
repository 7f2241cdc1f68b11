"""What naming a leak's lines costs (monitors/leak_sites.py): decode tok/s of the default model
with tracemalloc and the tensor marks on ÷ off, rounds interleaved (off, on / on, off, …) in one
process, and the seconds one reading at a baseline takes. Why `leakcheck` alone turns it on.

    .venv/bin/python benchmarks/engine/leak_sites_cost.py [--rounds 4] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.leak_sites import LeakSites
from tui_app.core.session import Session
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import RunRequest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    req = RunRequest(prompt="Tell me about the sea.", max_new_tokens=args.tokens, ignore_eos=True)
    engine.run(req)  # warm
    tps: dict[str, list[float]] = {"off": [], "on": []}
    reading_s = []
    for k in range(args.rounds):
        for mode in ("off", "on") if k % 2 == 0 else ("on", "off"):
            sites = LeakSites(warmup=0)
            if mode == "on":
                sites.start()
            engine.run(req)
            t = time.perf_counter()
            sites.baseline()
            if mode == "on":
                reading_s.append(time.perf_counter() - t)
            sites.stop()
            tps[mode].append(session.rows()[-1].stats.decode_tps)
    off, on = statistics.median(tps["off"]), statistics.median(tps["on"])
    print(f"decode tok/s, median of {args.rounds}: off {off:.2f}, on {on:.2f}, on ÷ off {on / off:.3f}")
    print(f"one reading at a baseline: median {statistics.median(reading_s):.2f} s (max {max(reading_s):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
