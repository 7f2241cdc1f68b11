"""`tokentop run`: the TUI on the engine's process, or with --no-tui the numbers alone.

Without a TUI the engine runs in this process: there is no UI to compete with it for the GIL.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace

from monitors.events import EngineError, LeverRefused
from monitors.routing import load_text
from monitors.text import plural
from tui_app.commands.options import COUNT, add_engine, add_ui, check_engine, check_models
from tui_app.core import batch_view, fmt, readings
from tui_app.core.export import run_json
from tui_app.core.options import EXIT_USAGE, EngineOptions, PromptOptions, UiOptions, engine_config, open_recording, run_request
from tui_app.core.session import Row, Session
from tui_app.requests import Profile

PARSER = {"help": "the TUI (default), or --no-tui for numbers only"}


@dataclass(kw_only=True)
class Options(EngineOptions, PromptOptions, UiOptions):
    no_tui: bool
    runs: int
    output: str
    profile_steps: int | None


def add_args(p: argparse.ArgumentParser) -> None:
    add_engine(p)
    add_ui(p)
    p.add_argument("--no-tui", action="store_true", help="print each run's numbers instead of drawing the TUI")
    p.add_argument("--runs", type=COUNT, default=1, help="with --no-tui: how many runs")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="with --no-tui: a line of figures a run, or one JSON object a run")
    p.add_argument(
        "--profile-steps",
        type=COUNT,
        default=None,
        metavar="N",
        help="the first N decode steps under torch.profiler (which slows them): where a step's time goes, "
        "by part of the model, and the window's trace for Perfetto (docs/anatomy.md); p does the same in the TUI",
    )


def main(opts: Options) -> int:
    check_engine(opts.threads)
    run_request(opts)  # validate before any model loads
    engine_config(opts)
    check_models(opts)
    if opts.no_tui:
        return run_headless(opts)
    from tui_app.ui.launch import run_tui

    return run_tui(opts, lambda: live_source(opts), "`tokentop run --no-tui` (or `tokentop bench`)")


def lever_option(lever: str, value) -> str:
    """The command-line option that asked for this lever value."""
    if lever == "cache":
        return "--no-cache"
    if lever == "compile":
        return "--compile"
    return f"--{lever} {value}"


def load_engine(args: EngineOptions, session: Session):
    """An in-process engine feeding `session`; None (after printing why) when the model cannot load
    or refuses a lever the command line asked for: numbers labelled without the lever asked for
    would answer another question than the one put."""
    from tui_app.engine.lever_rules import refused_at_start

    check_models(args)
    cfg = engine_config(args)
    # What the levers refuse among themselves needs no model: said before a load of seconds.
    if early := refused_at_start(cfg.levers, cfg.temperature, cfg.batch_prompts):
        for lever, value, why in early:
            print(f"tokentop: {lever_option(lever, value)} refused: {why}", file=sys.stderr)
        return None
    import gc

    # As in the engine's own process (engine/main.py): torch's and transformers' imports and the
    # load make millions of objects that live as long as the engine, which collections while they
    # are made walk again and again; load() ends with a collection and gc.freeze(). An in-process
    # caller that had it off keeps it off.
    was_on = gc.isenabled()
    gc.disable()
    try:
        return _loaded(cfg, session)
    finally:
        if was_on:
            gc.enable()


def _loaded(cfg, session: Session):
    from tui_app.engine.generation import Engine
    from tui_app.engine.models import ModelError

    refused: list[LeverRefused] = []

    def listen(ev) -> None:
        if isinstance(ev, LeverRefused):
            refused.append(ev)

    session.listeners.append(listen)
    # Appending to an earlier recording, runs are numbered on from its last.
    first = session.recorder.first_run_id if session.recorder is not None else 1
    engine = Engine(replace(cfg, first_run_id=first), session.feed)
    try:
        engine.load()
    except ModelError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return None
    finally:
        session.listeners.remove(listen)
    for ev in refused:
        print(f"tokentop: {lever_option(ev.lever, ev.value)} refused: {ev.reason}", file=sys.stderr)
    return None if refused else engine


def row_line(row: Row) -> str:
    s, f = row.stats, row.finished
    itl = s.itl
    parts = [
        f"run {row.label:<5} [{row.levers_label}]",
        f"prompt {s.prompt_tokens} tok",
        f"new {s.n_tokens} tok",
        f"TTFT {fmt.ms(s.ttft_s)}",
        *([fmt.phases(s)] if fmt.phased(s) else []),
        f"ITL p50 {fmt.ms(itl.p50)} p95 {fmt.ms(itl.p95)}",
        f"{fmt.num(s.decode_tps)} tok/s" + (f" (steps alone {fmt.num(s.compute_tps)})" if s.compute_s else ""),
        f"e2e {fmt.num(s.e2e_s, 2)} s",
    ]
    server = bool(s.levers.server)  # a server's KV is its own gauge, shown with its figures
    if not server:
        parts.append(f"KV {fmt.nbytes(s.kv_bytes)}" + (f" (cache off: {row.cache_note})" if row.cache_note else ""))
    if s.proposed:
        parts.append(f"accept {fmt.pct(s.accept_rate)} ({fmt.num(s.mean_accepted_len, 2)} tok/step)")
    if f is not None:
        if f.peak_rss is not None:
            parts.append(f"{'server RSS' if server else 'peak RSS'} {fmt.nbytes(f.peak_rss)}")
        if f.perplexity is not None:
            parts.append(f"ppl {f.perplexity:.2f}")
        if f.expert_counts:
            parts.append(load_text(f.expert_counts))
        if f.stop_reason != "max tokens":
            parts.append(f"ended: {f.stop_reason}")
        parts.append(f"vs plain greedy: {f.diff_note}")
    elif row.note:  # a run cut off: its numbers are those of the tokens that came
        parts.append(f"ended: {row.note}")
    return "  ".join(parts)


def experts_read(session: Session, run_id: int) -> str:
    """An MoE's steps read the experts their positions touched, not one token's k of n: the read rate says which it weighed."""
    run, hits, steps = session.decode_hits
    r = session.ready.routing if session.ready else None
    if not r or run != run_id or not steps:
        return ""
    return f", weighing the experts each step read (a mean of {hits / steps:.1f} of {r['layers']}×{r['experts']}; one token's: {r['layers']}×{r['top_k']})"


def run_headless(args: Options) -> int:
    recorder = open_recording(args)
    session = Session(recorder=recorder)
    errors: list[str] = []
    session.listeners.append(lambda ev: errors.append(ev.message) if isinstance(ev, EngineError) else None)
    # -o json: stdout is one JSON object a run, and the lines for a reader go to stderr
    human = sys.stderr if args.output == "json" else sys.stdout
    try:
        engine = load_engine(args, session)
        if engine is None:
            return EXIT_USAGE
        r = session.ready
        print(
            f"{r.model} on {fmt.where(r)} ({r.dtype}, {plural(r.threads, 'thread')}): {r.n_params / 1e6:.0f}M params, "
            f"{fmt.nbytes(r.weight_bytes)} weights, loaded from {r.source} in {r.load_s:.1f} s",
            file=human,
            flush=True,
        )
        if r.routing_note:
            print(f"tokentop: an MoE whose routing is not counted: {r.routing_note}", file=sys.stderr, flush=True)
        if args.profile_steps:
            from tui_app.folders import FolderError, write_stamped

            try:  # the folder is checked now: a window that cannot write its trace is no use
                trace = write_stamped(args.out_dir, "the step's trace", "trace", "json", lambda path: None)
            except FolderError as exc:
                print(f"tokentop: {exc}", file=sys.stderr)
                return EXIT_USAGE
            engine.command(Profile(str(trace), args.profile_steps))
        for _ in range(args.runs):
            errors.clear()
            fin = engine.run(run_request(args))
            if fin is None:
                print(f"tokentop: {errors[-1] if errors else 'run failed'}", file=sys.stderr)
                return EXIT_USAGE
            for message in errors:  # a run that ended on an error (or ran out of memory) says which
                print(f"tokentop: run {fin.run_id}: {message.splitlines()[0]}", file=sys.stderr)
            if args.output == "json":
                print(run_json(session, fin.run_id), flush=True)
            elif args.runs == 1:
                print(fin.text.strip(), flush=True)
            if args.output != "json":
                for row in session.rows():
                    if row.run_id == fin.run_id:
                        print(row_line(row), flush=True)
            if session.batch_steps and session.batch_steps[-1].run_id == fin.run_id:
                print(f"  {batch_view.summary(list(session.batch_steps), session.levers.batch)}", file=human, flush=True)
            if session.anatomy is not None and session.anatomy.run_id == fin.run_id:
                print("\n".join(readings.anatomy_lines(session.anatomy)), file=human, flush=True)
                verdict = session.run_rooflines.get(session.anatomy.run_id)
                print(f"  {verdict.text if verdict else 'no roofline: the run had no decode step to weigh it against'}", file=human, flush=True)
            session.trim()
            read = readings.read_rate(session)
            if read is not None:
                bw = session.bandwidth
                print(
                    f"  memory: the last {plural(len(session.reads), 'decode step')} read {read[0] / 1e9:.1f} GB/s, {read[1]:.2f} of {bw.source} "
                    f"({bw.read_bps / 1e9:.1f} GB/s){experts_read(session, fin.run_id)}",
                    file=human,
                    flush=True,
                )
        if session.verdict and args.runs > 1:
            print(session.verdict.text(), file=human)
            if session.device_verdicts:
                print(readings.device_leak_text(session), file=human)
        return 0 if recorder is None or recorder.stopped is None else 1  # asked to record, it could not record every run
    finally:
        if recorder is not None:
            recorder.close()
            if recorder.kept and recorder.stopped is None:
                print(f"recorded to {recorder.path}", file=sys.stderr)


def engine_source(config, log_path: str | None = None):
    """The engine's process as the app's event source."""
    from tui_app.core.sources import LiveSource
    from tui_app.engine.main import engine_main

    return LiveSource(config, log_path, target=engine_main)


def live_source(args: EngineOptions):
    """The engine process for these arguments, its output going to a log beside the model cache
    (FolderError, one line, when that folder cannot be written)."""
    from tui_app.folders import cache_root, require

    log_dir = require(cache_root(), "the engine log", "TOKENTOP_CACHE")
    return engine_source(engine_config(args), str(log_dir / "engine.log"))
