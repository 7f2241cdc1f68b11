"""Soak: drive the real app on the real model with random key presses, then check that nothing
crashed, the UI's memory stayed flat, the leak detector stayed quiet, and every finished run is in
the recording. The full soak (30 minutes or 500 runs) runs from here; tests/system/test_soak.py runs a
one-minute variant in CI.

    .venv/bin/python benchmarks/terminal/soak.py [--minutes 30] [--runs 500] [--seed 1]

Attached (`--attach URL`): the real app on a running server, auto-repeat at --concurrency
streams for --minutes, nothing pressed. Every 10 s it reads the UI's RSS and the server client's,
the depth of the client's event queue, the recording's size and the UI's RSS in parts (glibc's
heap in use, pymalloc's arenas, the Python objects in them: which part moves); after the warm-up (until every
ring buffer of the session is full, at most half the soak) the RSS trends are fitted as the leak
detector fits baselines (monitors/leaks.py: least squares, 95 % interval). It passes when no
error was said, every finished run is in the recording, neither RSS trend lies wholly above
0.1 MiB/min, the event queue stays under 1,000 batches, and the recording's bytes per run in the
soak's second half are within 10 % of its first half's.

    .venv/bin/python benchmarks/terminal/soak.py --attach http://127.0.0.1:8000 --minutes 30 --concurrency 32

Where a soak's memory went (`--replay FILE`): a soak's recording replayed into the real app
(history 500, 160×45, as the attached soak runs it), paused at each of --marks finished runs for a
tracemalloc snapshot; prints what grew between consecutive marks, by file, largest first. Hours of
soak take minutes to replay, and tracemalloc slows only the replay.

    .venv/bin/python benchmarks/terminal/soak.py --replay /tmp/tokentop-soak-XXXX/soak.jsonl --marks 60,200,300
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.heap import Trend, growth, heap_parts
from monitors.codec import to_json
from monitors.events import RunFinished
from monitors.record import Recorder, read_recording
from monitors.sampler import Sampler
from tui_app.attach.client import CONCURRENCY
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


def soak_app(source, request: RunRequest, rec_path: str, out_dir: str, history: int) -> TokentopApp:
    """The real app as a user leaves it running: recording, sampling, auto-repeat on."""
    return TokentopApp(
        source,
        request,
        recorder=Recorder(rec_path),
        sampler=Sampler(hz=4, history=history),
        fps=8,
        auto=True,
        out_dir=out_dir,
        history=history,
    )


async def soak(
    seconds: float, max_runs: int, seed: int, keys=KEYS, out_dir: str | None = None, history: int = 4000, trace_allocations: bool = False
) -> SoakResult:
    rng = random.Random(seed)
    out_dir = out_dir or tempfile.mkdtemp(prefix="tokentop-soak-")
    rec_path = os.path.join(out_dir, "soak.jsonl")
    app = soak_app(engine_source(EngineConfig()), RunRequest(max_new_tokens=24), rec_path, out_dir, history)
    me = psutil.Process()
    presses = 0
    crashed = None
    rss_start = 0
    # Growth before every ring buffer is full is the bound being reached, not a leak: the sample
    # rings (history points at 4 Hz) fill last. First-use growth (screens, caches) comes before.
    warmup = min(max(60.0, history / 4.0), seconds / 2)
    t0 = time.monotonic()
    before, traced_start = None, 0
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
            # Or half the runs: a fast machine reached the 500-run stop before the time (no start to compare with).
            if not rss_start and (time.monotonic() - t0 > warmup or len(app.session.finished_ids) >= max_runs // 2):
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
        grew = growth(before, traced_start)
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


QUEUE_BOUND = 1000  # batches of events waiting for the UI (the client sends one every 5 ms at most)


@dataclass
class AttachedSoak:
    seconds: float
    warmup_s: float
    rings_full: bool  # the warm-up ended with every ring buffer full (else at half the soak)
    runs: int
    recorded_runs: int
    missing: list
    errors: list
    trends: list
    queue_max: int
    bytes_per_run: tuple  # mean bytes of a run's own events in the recording: (first half, second half) of the runs after the warm-up
    trace: list  # (s, UI MiB, client MiB, queue batches, recording MiB, runs, UI C heap, pymalloc arenas, Python objects MiB) every 10 s
    heap: list  # the UI's RSS in parts (heap_parts), fitted as the RSS is: which part moves
    grew: list = field(default_factory=list)  # --trace-allocations: where the UI's Python memory grew after the warm-up

    @property
    def ok(self) -> bool:
        a, b = self.bytes_per_run
        return (
            not self.errors
            and not self.missing
            and self.runs > 0
            and all(t.flat for t in self.trends)
            and self.queue_max < QUEUE_BOUND
            and abs(b / a - 1) <= 0.1
        )

    def text(self) -> str:
        a, b = self.bytes_per_run
        return (
            f"attached soak: {self.seconds / 60:.1f} min, {self.runs} runs finished, {self.recorded_runs} in the recording, missing {self.missing}; "
            f"errors {len(self.errors)}{': ' + self.errors[0] if self.errors else ''}\n"
            f"after a warm-up of {self.warmup_s / 60:.1f} min ({'every ring buffer full' if self.rings_full else 'half the soak: rings not yet full'}):\n  "
            + "\n  ".join(t.text() + ("" if t.flat else "  ← rising") for t in self.trends)
            + "\n  the UI's RSS in parts: "
            + "; ".join(t.text() for t in self.heap)
            + f"\n  event queue at most {self.queue_max} batches (bound {QUEUE_BOUND}); a run's own lines in the recording {a / 1024:.1f} → "
            f"{b / 1024:.1f} KiB (the runs' first half → second half, {b / a - 1:+.1%})\n"
            f"every 10 s (s, UI MiB, client MiB, queue, recording MiB, runs, UI C heap MiB, pymalloc arenas MiB, Python objects MiB): {self.trace}"
        ) + "".join("\n" + line for line in self.grew)


async def attached_soak(
    url: str,
    seconds: float,
    concurrency: int,
    max_new: int = 32,
    timeout_s: float = 120.0,
    out_dir: str | None = None,
    history: int = 500,
    trace_allocations: bool = False,
) -> AttachedSoak:
    from monitors.events import EngineError, LeverRefused
    from tui_app.attach.client import AttachConfig
    from tui_app.core.sources import AttachSource

    out_dir = out_dir or tempfile.mkdtemp(prefix="tokentop-soak-")
    rec_path = os.path.join(out_dir, "soak.jsonl")
    # A stream queued behind the server's busy slots hears nothing until one frees: on llama.cpp's 4
    # slots, 32 streams wait up to 7 runs of 4; the default 30 s would call that a stall.
    config = AttachConfig(url=url, concurrency=concurrency, timeout_s=timeout_s)
    source = AttachSource([config], os.path.join(out_dir, "attach.log"))
    app = soak_app(source, RunRequest(max_new_tokens=max_new, ignore_eos=True), rec_path, out_dir, history)
    errors: list[str] = []

    def said(ev) -> None:
        if isinstance(ev, (EngineError, LeverRefused)):
            errors.append(ev.message if isinstance(ev, EngineError) else ev.reason)

    app.session.listeners.append(said)
    me = psutil.Process()
    every = 10.0
    trace: list = []
    warmup_at = None
    before, traced_start = None, 0
    if trace_allocations:
        tracemalloc.start(8)
    async with app.run_test(size=(160, 45)) as pilot:
        t0 = time.monotonic()
        while app.session.ready is None and time.monotonic() - t0 < 120:
            await pilot.pause(0.2)
        client = psutil.Process(source.proc.pid)
        t0 = time.monotonic()
        next_at = 0.0
        while (elapsed := time.monotonic() - t0) < seconds and app.session.fatal is None:
            if elapsed >= next_at:
                next_at += every
                trace.append(
                    (
                        round(elapsed),
                        round(me.memory_info().rss / 2**20, 1),
                        round(client.memory_info().rss / 2**20, 1),
                        source.proc.events.qsize(),
                        round(os.path.getsize(rec_path) / 2**20, 2) if os.path.exists(rec_path) else 0.0,
                        len(app.session.finished_ids) and app.session.finished_ids[-1],
                        *(round(x, 2) for x in heap_parts()),
                    )
                )
                s = app.session
                full = all(len(ring) == ring.maxlen for ring in (s.latency, s.samples, s.server))
                if warmup_at is None and (full or elapsed >= seconds / 2):
                    warmup_at, rings_full = len(trace) - 1, full
                    if trace_allocations:
                        before, traced_start = tracemalloc.take_snapshot(), tracemalloc.get_traced_memory()[0]
            await pilot.pause(0.5)
        if app.session.fatal:
            errors.append(app.session.fatal)
        app.auto = False
        await until_idle(pilot, app)
        finished = list(app.session.finished_ids)
        grew = growth(before, traced_start)
        await pilot.press("q")
    events = read_recording(rec_path).events
    recorded = {e.run_id for e in events if isinstance(e, RunFinished)}
    after = trace[warmup_at or 0 :]
    # Each finished run's own lines (its start, steps, end), in runs finished after the warm-up.
    own: dict[int, int] = {}
    for ev in events:
        run = getattr(ev, "run_id", None)
        if run is not None and run > after[0][5]:
            own[run] = own.get(run, 0) + len(to_json(ev)) + 1
    sizes = [own[r] for r in sorted(own) if r in recorded]
    half = len(sizes) // 2
    return AttachedSoak(
        time.monotonic() - t0,
        after[0][0],
        bool(warmup_at is not None and rings_full),
        len(finished),
        len(recorded),
        [r for r in finished if r not in recorded],
        errors,
        [Trend.of("UI RSS", [x[1] for x in after], every), Trend.of("client RSS", [x[2] for x in after], every)],
        max(x[3] for x in trace),
        (statistics.fmean(sizes[:half]) if half else math.nan, statistics.fmean(sizes[half:]) if half else math.nan),
        trace,
        [Trend.of(name, [x[k] for x in after], every) for k, name in ((6, "C heap in use"), (7, "pymalloc arenas"), (8, "Python objects"))],
        grew,
    )


async def replay_growth(path: str, marks: list[int], speed: float = 10.0, history: int = 500) -> list[str]:
    """What grew in the app's traced Python memory between consecutive marks (finished runs) of a
    recording replayed into it, by file, largest first. The replay pauses for each snapshot, taken
    at the first frame that passes the mark and labelled with the runs finished by then."""
    from tui_app.core.sources import ReplaySource

    rec = read_recording(path)
    if not rec.events:
        return [f"{path}: {rec.error or 'no events'}"]
    source = ReplaySource(rec.events, speed=speed)
    app = TokentopApp(source, None, fps=8, history=history)
    snaps: list[tuple[int, tracemalloc.Snapshot]] = []
    left = sorted(marks)
    async with app.run_test(size=(160, 45)) as pilot:
        while source.t0_wall is None:
            await pilot.pause(0.05)
        tracemalloc.start(1)
        try:
            while left:
                await pilot.pause(0.05)
                if source.done and not app.running and len(app.session.finished_ids) < left[0]:
                    break
                if len(app.session.finished_ids) >= left[0]:
                    source.pause(True)
                    await pilot.pause(0.5)  # the frame that shows the mark's run is drawn
                    snaps.append((len(app.session.finished_ids), tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])))
                    left.pop(0)
                    source.pause(False)
        finally:
            tracemalloc.stop()
        await pilot.press("q")
    out = []
    for (na, a), (nb, b) in itertools.pairwise(snaps):
        stats = b.compare_to(a, "filename")
        total = sum(st.size_diff for st in stats)
        out.append(f"run {na} → {nb}: {total / 2**10:+.0f} KiB traced")
        out += [f"  {st.size_diff / 2**10:+.0f} KiB in {st.count_diff:+d} blocks: {st.traceback[0].filename}" for st in stats[:10]]
    if left:
        out.append(f"the recording has {len(app.session.finished_ids)} finished runs: no mark at {', '.join(map(str, left))}")
    return out


async def until_idle(pilot, app, timeout: float = 120) -> None:
    """The run in flight ends (auto-repeat is off), so the last finished run is on disk."""
    end = time.monotonic() + timeout
    while app.running and time.monotonic() < end:
        await pilot.pause(0.5)


def marks(text: str) -> list[int]:
    try:
        return [int(m) for m in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: finished runs, comma-separated (60,200,300)") from None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace-allocations", action="store_true", help="print where Python memory grew after the warm-up (slow)")
    ap.add_argument("--attach", default=None, metavar="URL", help="soak the app attached to this running server instead (auto-repeat, no keys)")
    ap.add_argument("--concurrency", type=int, default=32, choices=CONCURRENCY, help="with --attach: streams per run (default 32)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="with --attach: tokens per stream (default 32)")
    ap.add_argument("--timeout", type=float, default=120.0, help="with --attach: seconds a stream may stay silent (default 120: queued streams wait)")
    ap.add_argument("--replay", default=None, metavar="FILE", help="where a soak's memory went: its recording replayed, tracemalloc compared at --marks")
    ap.add_argument("--marks", default=[60, 200, 300], type=marks, help="with --replay: finished runs at which to compare (default 60,200,300)")
    args = ap.parse_args()
    if args.replay:
        for line in asyncio.run(replay_growth(args.replay, args.marks)):
            print(line)
        return 0
    if args.attach:
        a = asyncio.run(
            attached_soak(args.attach, args.minutes * 60, args.concurrency, args.max_new_tokens, args.timeout, trace_allocations=args.trace_allocations)
        )
        print(a.text())
        return 0 if a.ok else 1
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
