"""Observer overhead and UI cost, side by side in one run.

1. decode tok/s of the default model with the full TUI running (real rendering in a 160×45 tmux
   terminal at the default fps, all panes visible) ÷ the same engine process with no UI. Target ≥ 0.97.
2. CPU % of one core used by the UI process during full-speed generation. Target ≤ 10 %.

Rounds interleave engine-alone and TUI (alone, TUI, alone, TUI, …), and the ratio is the median
of the rounds' ratios (each round's TUI median ÷ its engine-alone median) with their range, so
drift on the machine, which swings by a third within minutes, hits both halves of a pair alike.
Rates are wall-clock from the event stream (monitors/timing.py), so the observer's costs that
land between steps (queue traffic, the engine waiting on its emits) count.

    .venv/bin/python benchmarks/terminal/observer_overhead.py [--runs 3] [--rounds 5] [--tokens 64] [--model M --device cuda --dtype bf16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp, runs_finished
from monitors.events import RunFinished
from monitors.record import read_recording
from tui_app.core.session import Session


def decode_tps(events, skip_first: int = 1) -> list[float]:
    session = Session.from_events(events)
    runs = [r for r in session.timer.runs.values() if r.finished is not None]
    return [r.total.decode_tps for r in runs[skip_first:]]


def engine_alone(runs: int, tokens: int, engine: dict) -> list[float]:
    from tui_app.engine.generation import EngineConfig
    from tui_app.engine.main import engine_main
    from tui_app.process import EngineProcess
    from tui_app.requests import Run, RunRequest

    proc = EngineProcess(EngineConfig(**engine), target=engine_main).start()
    events = []
    try:
        req = RunRequest(max_new_tokens=tokens, ignore_eos=True)
        for _ in range(runs + 1):
            proc.send(Run(req))
            while True:
                ev = proc.get(timeout=120)
                if ev is None:
                    raise RuntimeError(f"engine stalled: {proc.exit_info().message}")
                events.append(ev)
                if isinstance(ev, RunFinished):
                    break
    finally:
        proc.shutdown()
    return decode_tps(events)


def with_tui(runs: int, tokens: int, fps: float, engine: dict) -> tuple[list[float], float]:
    rec = tempfile.mktemp(suffix=".jsonl", prefix="tokentop-bench-")
    args = ["--auto", "--ignore-eos", "--max-new-tokens", str(tokens), "--record", rec, "--fps", str(fps)]
    app = TmuxApp("tt-observer", args + [arg for key, value in engine.items() for arg in (f"--{key}", value)])
    try:
        app.wait_for(lambda s: runs_finished(s) >= 1, timeout=180)
        ui = psutil.Process(app.pid())
        c0, t0 = ui.cpu_times(), time.perf_counter()
        # Polled twice a second: capturing the pane is itself work on this 2-core machine.
        app.wait_for(lambda s: runs_finished(s) >= runs + 1, timeout=60 * runs, poll=0.5)
        c1, t1 = ui.cpu_times(), time.perf_counter()
    finally:
        app.close()
    cpu = ((c1.user - c0.user) + (c1.system - c0.system)) / (t1 - t0) * 100
    events = read_recording(rec).events
    os.unlink(rec)
    return decode_tps(events)[:runs], cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5, help="engine-alone / TUI pairs (at least 5 for a median with a range)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--fps", type=float, default=4.0)  # the app's default
    ap.add_argument("--model", default=None, help="default: the bundled model")
    ap.add_argument("--device", default=None, help="default: the app's (cpu where there is no GPU)")
    ap.add_argument("--dtype", default=None)
    args = ap.parse_args()
    engine = {key: getattr(args, key) for key in ("model", "device", "dtype") if getattr(args, key) is not None}
    alone, tui, cpus, ratios = [], [], [], []
    for r in range(args.rounds):
        a = engine_alone(args.runs, args.tokens, engine)
        t, cpu = with_tui(args.runs, args.tokens, args.fps, engine)
        ratios.append(statistics.median(t) / statistics.median(a))
        print(
            f"round {r + 1}: engine alone {statistics.median(a):.2f} tok/s, with TUI {statistics.median(t):.2f} tok/s (× {ratios[-1]:.3f}), UI CPU {cpu:.1f} %",
            flush=True,
        )
        alone += a
        tui += t
        cpus.append(cpu)
    ma, mt = statistics.median(alone), statistics.median(tui)
    where = (args.model or "default model") + (f" on {args.device}" if args.device else "")
    print(f"\n{where}, {args.tokens} tokens/run, {args.rounds} rounds of {args.runs} runs each, TUI at 160×45, {args.fps:g} fps, {os.cpu_count()} cores\n")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| decode tok/s, engine alone (median) | {ma:.2f} | |")
    print(f"| decode tok/s, with the TUI (median) | {mt:.2f} | |")
    print(f"| ratio TUI ÷ alone, the median of the rounds' ratios (range) | {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) | ≥ 0.97 |")
    print(f"| UI process CPU, % of one core (mean of rounds) | {statistics.mean(cpus):.1f} | ≤ 10 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
