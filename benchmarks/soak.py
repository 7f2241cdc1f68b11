"""Soak: drive the real app on the real model with random key presses, then check that nothing
crashed, the UI's memory stayed flat, the leak detector stayed quiet, and every finished run is in
the recording. The full soak (30 minutes or 500 runs) runs from here; tests/system/test_soak.py runs a
one-minute variant in CI.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--runs 500] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monitors.events import RunFinished
from monitors.record import Recorder, read_recording
from monitors.sampler import Sampler
from tui_app.commands.run import engine_source
from tui_app.engine.config import EngineConfig
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

# q and ctrl+c end the app; c compiles for a minute on CPU, too long for the short variant.
KEYS = ["k", "w", "s", "b", "l", "r", "space", "a", "v", "question_mark", "escape", "e", "n"]
SIZES = [(160, 45), (80, 24), (120, 40), (20, 5)]


@dataclass
class SoakResult:
    seconds: float
    presses: int
    runs: int
    recorded_runs: int
    missing: list
    rss_start: int
    rss_end: int
    verdict: str
    crashed: str | None
    rss_trace: list  # (seconds, MiB) every 10 s: a plateau is warm-up, a slope is a leak
    grew: list = field(default_factory=list)  # with trace_allocations: where Python memory grew after the warm-up

    @property
    def rss_growth(self) -> float:
        """From the end of the warm-up to the end of the soak."""
        return self.rss_end / self.rss_start - 1


async def soak(
    seconds: float, max_runs: int, seed: int, keys=KEYS, out_dir: str | None = None, history: int = 4000, trace_allocations: bool = False
) -> SoakResult:
    rng = random.Random(seed)
    out_dir = out_dir or tempfile.mkdtemp(prefix="tokentop-soak-")
    rec_path = os.path.join(out_dir, "soak.jsonl")
    app = TokentopApp(
        engine_source(EngineConfig()),
        RunRequest(max_new_tokens=24),
        recorder=Recorder(rec_path),
        sampler=Sampler(hz=4, history=history),
        fps=8,
        auto=True,
        out_dir=out_dir,
        history=history,
    )
    me = psutil.Process()
    presses = 0
    crashed = None
    rss_start = 0
    # Growth before every ring buffer is full is the bound being reached, not a leak: the sample
    # rings (history points at 4 Hz) fill last. First-use growth (screens, caches) comes before.
    warmup = min(max(60.0, history / 4.0), seconds / 2)
    t0 = time.monotonic()
    before = None
    if trace_allocations:
        tracemalloc.start(8)
    async with app.run_test(size=(160, 45)) as pilot:
        while not app.session.finished_ids and time.monotonic() - t0 < 120:
            await pilot.pause(0.2)
        t0 = time.monotonic()
        trace: list = []
        while time.monotonic() - t0 < seconds and len(app.session.finished_ids) < max_runs:
            elapsed = time.monotonic() - t0
            if not trace or elapsed - trace[-1][0] >= 10:
                trace.append((round(elapsed), round(me.memory_info().rss / 2**20, 1)))
            if not rss_start and time.monotonic() - t0 > warmup:
                rss_start = me.memory_info().rss
                before = tracemalloc.take_snapshot() if trace_allocations else None
                traced_start = tracemalloc.get_traced_memory()[0]
            key = rng.choice(keys)
            if key == "n":
                await pilot.press("n", *"Count to five.", "enter")
            else:
                await pilot.press(key)
            presses += 1
            if rng.random() < 0.05:
                await pilot.resize_terminal(*rng.choice(SIZES))
            if key == "space" and app.paused:
                await pilot.pause(0.3)
                await pilot.press("space")
            if not app.auto:
                await pilot.press("a")
            if app.session.fatal:
                crashed = app.session.fatal
                break
            await pilot.pause(rng.uniform(0.05, 0.6))
        await pilot.resize_terminal(160, 45)
        app.auto = False
        await pilot.pause(2.0)
        rss_end = me.memory_info().rss
        grew = []
        if before is not None:
            stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
            traced_end = tracemalloc.get_traced_memory()[0]
            grew = [f"Python objects (traced): {traced_start / 2**20:.1f} → {traced_end / 2**20:.1f} MiB"] + [
                f"{st.size_diff / 2**20:+.2f} MiB in {st.count_diff:+d} blocks at "
                + " < ".join(f"{os.path.basename(fr.filename)}:{fr.lineno}" for fr in list(st.traceback)[-4:])
                for st in stats[:12]
            ]
            tracemalloc.stop()
        finished = list(app.session.finished_ids)
        verdict = app.session.verdict.text() if app.session.verdict else "no verdict"
        suspected = app.session.verdict is not None and app.session.verdict.status == "suspected"
        await pilot.press("q")
    recorded = {e.run_id for e in read_recording(rec_path).events if isinstance(e, RunFinished)}
    return SoakResult(
        time.monotonic() - t0,
        presses,
        len(finished),
        len(recorded),
        [r for r in finished if r not in recorded],
        rss_start,
        rss_end,
        ("SUSPECTED " if suspected else "") + verdict,
        crashed,
        trace,
        grew,
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace-allocations", action="store_true", help="print where Python memory grew after the warm-up (slow)")
    args = ap.parse_args()
    r = asyncio.run(soak(args.minutes * 60, args.runs, args.seed, trace_allocations=args.trace_allocations))
    print(
        f"soak: {r.seconds / 60:.1f} min, {r.presses} key presses, {r.runs} runs finished, {r.recorded_runs} in the recording, "
        f"missing {r.missing}; UI RSS {r.rss_start / 2**20:.0f} → {r.rss_end / 2**20:.0f} MiB ({r.rss_growth * 100:+.1f} %); "
        f"{r.verdict}; crashed: {r.crashed}\nUI RSS every 10 s (s, MiB): {r.rss_trace}"
    )
    for line in r.grew:
        print(line)
    ok = r.crashed is None and not r.missing and abs(r.rss_growth) <= 0.05 and not r.verdict.startswith("SUSPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
