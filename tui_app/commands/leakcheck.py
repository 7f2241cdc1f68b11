"""`tokentop leakcheck`: repeated runs of the engine in this process at the engine's own pace, the
memory baseline trend and a verdict; on a suspected leak, a few runs more that name the lines that
allocate it (monitors/leak_sites.py traces every allocation, at a seventh of the engine's pace, so
only those runs are traced); exit 1 on a suspected leak (for CI)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass

from monitors.events import AllocatorHistory, EngineError, RunFinished
from monitors.leak_sites import LeakSites
from monitors.text import plural
from tui_app.commands.options import COUNT, add_engine, check_engine
from tui_app.commands.run import load_engine
from tui_app.core import fmt, readings
from tui_app.core.braille import text_plot
from tui_app.core.options import EXIT_USAGE, EngineOptions, PromptOptions, require_writable, run_request
from tui_app.core.session import DEVICE_BASELINES, Session
from tui_app.requests import History

MB = 1024 * 1024
# Traced runs after a suspected verdict: three baselines, two runs of growth between the first and
# the last, enough to tell a line that keeps memory every run from one that grew once.
SITE_RUNS = 3
PARSER = {"help": "repeated runs, the memory baseline trend and a verdict (exit 1 on a suspected leak)"}


@dataclass(kw_only=True)
class Options(EngineOptions, PromptOptions):
    runs: int
    output: str
    cuda_snapshot: str | None


def add_args(p: argparse.ArgumentParser) -> None:
    add_engine(p)
    p.add_argument("--runs", type=COUNT, default=30)
    p.add_argument("-o", "--output", choices=("text", "json"), default="text", help="json: one object on stdout (verdicts, baselines, sites), for CI")
    p.add_argument(
        "--cuda-snapshot",
        metavar="FILE",
        default=None,
        help="on CUDA: record the allocator's history from after the warm-up to the verdict, saved as a snapshot "
        "that PyTorch's memory viewer opens (https://pytorch.org/memory_viz); it slows the runs",
    )
    p.set_defaults(max_new_tokens=16)


def main(opts: Options) -> int:
    check_engine(opts.threads)
    return leakcheck(opts)


def _snapshot_refusal(asked: str) -> str | None:
    """Why --cuda-snapshot cannot record on the device the engine's load will resolve, or None."""
    from tui_app.engine.models import ModelError, resolve_device

    try:
        device = resolve_device(asked)
    except ModelError as exc:
        return str(exc)
    return None if device.startswith("cuda") else f"--cuda-snapshot records CUDA's allocator; this engine runs on {device}"


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
    if args.cuda_snapshot:  # refused before the model loads: no check without its file or off CUDA
        require_writable(args.cuda_snapshot, "--cuda-snapshot")
        if why := _snapshot_refusal(args.device):
            print(f"tokentop: {why}", file=sys.stderr)
            return EXIT_USAGE
    engine = load_engine(args, session)
    if engine is None:
        return EXIT_USAGE
    req = run_request(args)
    said: list[str] = []  # the engine's reason, where a run fails
    session.listeners.append(lambda ev: said.append(ev.message) if isinstance(ev, EngineError) else None)
    baselines: dict[str, list[float]] = {"engine RSS": []}  # and on CUDA each device source (session.DEVICE_BASELINES)
    session.listeners.append(
        lambda ev: print(f"\ntokentop: {readings.history_text(ev)[0]}", file=sys.stderr) if isinstance(ev, AllocatorHistory) and not ev.left else None
    )
    with _saved_history(engine):
        for i in range(args.runs):
            if args.cuda_snapshot and i == session.leak.warmup:  # the engine's own window (the app's H key), the rest of the check
                engine.command(History(args.cuda_snapshot, args.runs - i))
            fin = _run(engine, req, said, f"run {i + 1}")
            if fin is None:
                return EXIT_USAGE
            baselines["engine RSS"].append(fin.baseline_rss / MB)
            for name, attr in DEVICE_BASELINES:
                if getattr(fin, attr) is not None:
                    baselines.setdefault(name, []).append(getattr(fin, attr) / MB)
            device = f"  {readings.device_leak_text(session)}" if session.device_verdicts else ""
            line = f"run {i + 1}/{args.runs}  baseline {baselines['engine RSS'][-1]:.1f} MiB  {session.verdict.text()}{device}"
            print(f"\r{line}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    # The verdict is the untraced runs'; the traced runs after it only name where the memory grows.
    verdict = session.verdict
    device = readings.device_leak(session) if session.device_verdicts else None
    said_device = readings.device_leak_text(session) if device is not None else None
    suspected = verdict.status == "suspected" or (device is not None and device[1].status == "suspected")
    # From after the verdict, and no further: a run that fails or a Ctrl-C leaves the process untraced.
    sites, grown, types = LeakSites(warmup=0, runs=args.runs), [], []
    if suspected:
        print(f"tokentop: tracing {SITE_RUNS} more runs to name the lines that grow", file=sys.stderr)
        with sites:
            for j in range(SITE_RUNS):
                if _run(engine, req, said, f"traced run {j + 1}") is None:
                    return EXIT_USAGE
                sites.baseline()
            grown = sites.grown()
            # tokentop's own objects are its session's ring buffers filling, bounded: not the engine's.
            types = [t for t in sites.grown_types(top=50) if not t[0].startswith(("tui_app.", "monitors."))][:5]
    if args.output == "json":
        verdicts = {"engine RSS": verdict, **({device[0]: device[1]} if device else {})}
        out = {
            "suspected": suspected,
            "verdicts": {name: {**vars(v), "text": v.text()} for name, v in verdicts.items()},
            "baselines_mib": baselines,
            "sites": [s.as_dict() for s in grown],
            "object_types": [{"type": name, "per_run": n} for name, n in types],
            "sites_runs": [sites.first.run, sites.last.run] if grown else None,
        }
        print(json.dumps(fmt.strict_json(out), allow_nan=False))
        return 1 if suspected else 0
    for name, ys in baselines.items():
        print(text_plot(ys, width=min(60, max(10, len(ys))), height=8, title=f"{name} baseline after each run (MiB)"))
    print(verdict.text())
    if said_device is not None:
        print(said_device)
    if suspected:
        print(sites_text(sites, grown))
        if types:
            print("objects that grew, by type (gc's count; tokentop's own left out):\n" + "\n".join(f"  {name}  {n:+.1f}/run" for name, n in types))
    return 1 if suspected else 0


def _run(engine, req, said: list[str], label: str) -> RunFinished | None:
    """One run; None, said on stderr with the engine's reason, where it failed."""
    fin = engine.run(req)
    if isinstance(fin, RunFinished):
        return fin
    print(f"\ntokentop: {label} failed: {said[-1] if said else 'the engine gave no reason'}", file=sys.stderr)
    return None


@contextlib.contextmanager
def _saved_history(engine):
    """A check that ends early (a failed run, Ctrl-C) still saves the allocator history it recorded."""
    try:
        yield
    finally:
        if engine.history is not None:
            engine.history.dump()


def sites_text(sites: LeakSites, grown: list) -> str:
    if not grown:
        return (
            "where: no Python allocation or tensor grew 0.01 MB a run or more; the growth is in memory "
            "that tracemalloc and torch's tensors do not see (a C library's own heap, or the allocator's)"
        )
    head = f"where it grew, runs {sites.first.run}-{sites.last.run} (Python's heap by tracemalloc; tensors by the line that made them):"
    return "\n".join([head, *(f"  {s.text()}" for s in grown)])
