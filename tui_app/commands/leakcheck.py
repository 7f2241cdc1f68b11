"""`tokentop leakcheck`: repeated runs of the engine in this process, the memory baseline trend
and a verdict; exit 1 on a suspected leak (for CI)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from monitors.events import RunFinished
from monitors.text import plural
from tui_app.commands.options import COUNT, add_engine, check_engine
from tui_app.commands.run import load_engine
from tui_app.core import readings
from tui_app.core.braille import text_plot
from tui_app.core.options import EXIT_USAGE, EngineOptions, PromptOptions, run_request
from tui_app.core.session import DEVICE_BASELINES, Session

MB = 1024 * 1024
PARSER = {"help": "repeated runs, the memory baseline trend and a verdict (exit 1 on a suspected leak)"}


@dataclass(kw_only=True)
class Options(EngineOptions, PromptOptions):
    runs: int


def add_args(p: argparse.ArgumentParser) -> None:
    add_engine(p)
    p.add_argument("--runs", type=COUNT, default=30)
    p.set_defaults(max_new_tokens=16)


def main(opts: Options) -> int:
    check_engine(opts.threads)
    return leakcheck(opts)


def leakcheck(args: Options) -> int:
    """Repeated runs; exit 1 when the baseline trend says the engine leaks (for CI)."""
    session = Session()
    need = session.leak.runs_needed
    if args.runs < need:
        print(
            f"tokentop: leakcheck --runs {args.runs} gives no verdict: the first {plural(session.leak.warmup, 'run')} warm up and the trend needs "
            f"{session.leak.min_runs} more; use --runs {need} or more",
            file=sys.stderr,
        )
        return EXIT_USAGE
    engine = load_engine(args, session)
    if engine is None:
        return EXIT_USAGE
    req = run_request(args)
    baselines: dict[str, list[float]] = {"engine RSS": []}  # and on CUDA each device source (session.DEVICE_BASELINES)
    for i in range(args.runs):
        fin = engine.run(req)
        if not isinstance(fin, RunFinished):
            print("tokentop: run failed", file=sys.stderr)
            return EXIT_USAGE
        baselines["engine RSS"].append(fin.baseline_rss / MB)
        for name, attr in DEVICE_BASELINES:
            if getattr(fin, attr) is not None:
                baselines.setdefault(name, []).append(getattr(fin, attr) / MB)
        device = f"  {readings.device_leak_text(session)}" if session.device_verdicts else ""
        line = f"run {i + 1}/{args.runs}  baseline {baselines['engine RSS'][-1]:.1f} MiB  {session.verdict.text()}{device}"
        print(f"\r{line}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for name, ys in baselines.items():
        print(text_plot(ys, width=min(60, max(10, len(ys))), height=8, title=f"{name} baseline after each run (MiB)"))
    print(session.verdict.text())
    suspected = session.verdict.status == "suspected"
    if session.device_verdicts:
        print(readings.device_leak_text(session))
        suspected |= readings.device_leak(session)[1].status == "suspected"
    return 1 if suspected else 0
