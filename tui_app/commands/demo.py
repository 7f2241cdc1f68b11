"""`tokentop demo [SCRIPT.toml]`: the tour (core/tour.py) run live in the TUI, captioned (the demo's
app: ui/demo_app.py), or with --no-tui printed step by step, so a script can be checked before
going on stage; `attach --demo` runs the server tour the same ways."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace

from monitors.events import EngineError, LeverRefused
from tui_app.commands.bench import apply_levers
from tui_app.commands.options import add_demo_leak, add_model, add_ui, check_engine, check_models
from tui_app.commands.run import load_engine
from tui_app.core.options import EXIT_USAGE, EngineOptions, UiOptions, UsageError, bounded, default_record_path, open_recording, require_writable
from tui_app.core.session import Session
from tui_app.core.tour import FINISHED, LEVERS, TourError, TourLog, TourStep, default_tour, fitting, load_tour

PARSER = {"help": "a guided, captioned tour of the levers (the built-in one or a TOML script)"}


@dataclass(kw_only=True)
class Options(EngineOptions, UiOptions):
    script: str | None
    no_tui: bool
    tokens: int | None
    hold: float | None
    report: str | None


def add_args(p: argparse.ArgumentParser) -> None:
    add_model(p)  # the tour sets the levers and prompts itself: greedy, from plain
    p.set_defaults(
        temperature=0.0,
        top_p=1.0,
        seed=0,
        no_cache=False,
        compile=False,
        quant="off",
        spec="off",
        batch=1,
        think_budget=0,
        batch_prompts="distinct",
        verbose=False,
    )
    add_demo_leak(p)  # a leak scene's (docs/demo.md)
    add_ui(p)
    p.add_argument("script", nargs="?", default=None, help="a tour script (TOML, [[step]] tables; see docs/demo.md); default: the built-in tour")
    p.add_argument("--no-tui", action="store_true", help="print each step's caption and measured effect instead of drawing the TUI")
    p.add_argument("--tokens", type=bounded(int, 1), default=None, help="new tokens per run in every step (default: each step's own)")
    p.add_argument("--hold", type=bounded(float, 0), default=None, help="seconds each step's effect stays on screen (default: each step's own)")
    p.add_argument("--report", metavar="FILE", default=None, help="after the tour, write its recording as a report (HTML, as `tokentop report` writes)")


def main(args: Options) -> int:
    """The tour, then with --report its recording as a report: checked first, so a tour is never
    given without the report it was asked for."""
    check_engine()
    if args.report:
        if args.no_record:
            raise UsageError("--report is made from the tour's recording: leave out --no-record")
        require_writable(args.report, "--report")
        args = replace(args, record=args.record or default_record_path())
    code = demo_main(args)
    if args.report and args.record and os.path.exists(args.record):
        from tui_app.commands.report import ReportError, build, write_html

        try:
            write_html(build(args.record), args.report)
        except ReportError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return code or EXIT_USAGE
        print(f"wrote {args.report}", file=sys.stderr)
    return code


def tour_steps(args) -> list[TourStep]:
    if args.tokens is not None and args.tokens < 1:
        raise UsageError(f"--tokens must be at least 1 (got {args.tokens})")
    if args.hold is not None and args.hold < 0:
        raise UsageError(f"--hold must not be negative (got {args.hold})")
    try:
        return load_tour(args.script, args.tokens, args.hold) if args.script else default_tour(args.tokens, args.hold)
    except TourError as exc:
        raise UsageError(str(exc)) from None


def demo_main(args: Options) -> int:
    steps = tour_steps(args)  # a bad script is refused before any model loads
    check_models(args)
    if args.no_tui:
        return run_headless_tour(args, steps)
    from tui_app.commands.run import live_source

    return tui_tour(args, steps, lambda: live_source(args), "`tokentop demo --no-tui`")


def tui_tour(args: UiOptions, steps: list[TourStep], make_source, no_tui: str) -> int:
    from tui_app.ui.demo_app import DemoApp
    from tui_app.ui.launch import run_tui
    from tui_app.ui.look import look_of

    apps: list[DemoApp] = []

    def make(args, source, recorder) -> DemoApp:
        from monitors.sampler import Sampler

        app = DemoApp(steps, source, recorder=recorder, sampler=Sampler(hz=args.hz or 4.0), fps=args.fps, look=look_of(args))
        apps.append(app)
        return app

    code = run_tui(args, make_source, no_tui, make_app=make)
    if apps and apps[0].tour_log.results:
        print("\n".join(apps[0].tour_log.summary()))
    return code


# ---------------------------------------------------------------- headless
def run_tour(engine, session: Session, steps: list[TourStep], say=print) -> TourLog:
    """Each step's levers set on an in-process engine, its runs, its measured effect; then the summary.
    The steps for a thinking model, or an MoE, are left out, saying so, where the model is not one."""
    steps, left = fitting(steps, bool(session.ready and session.ready.thinks), bool(session.ready and session.ready.routing))
    if left:
        say(left)
    log = TourLog(steps)
    errors: list[str] = []
    session.listeners.append(lambda ev: errors.append(ev.message) if isinstance(ev, EngineError) else None)
    for i, step in enumerate(steps, 1):
        say(f"[{i}/{len(steps)}] {step.label}: {step.caption}")
        refused = apply_levers(engine, {name: getattr(step.levers, name) for name in LEVERS})
        run_ids: list[int] = []
        if not refused:
            for _ in range(step.runs):
                errors.clear()
                fin = engine.run(step.request())
                if fin is None or fin.stop_reason not in FINISHED:
                    say(f"    run failed: {errors[-1] if errors else fin.stop_reason if fin else 'no run'}")
                    continue
                run_ids.append(fin.run_id)
        say("    → " + log.record(session, step, run_ids, [refused] if refused else []).effect())
    say("")
    for line in log.summary():
        say(line)
    return log


async def run_server_tour(servers, session: Session, steps: list[TourStep], say=print) -> TourLog:
    """Each step's streams and server set on the attached servers, its runs, its measured effect; then the summary."""
    log = TourLog(steps)
    refused: list[str] = []
    session.listeners.append(lambda ev: refused.append(f"{ev.lever}: {ev.reason}") if isinstance(ev, LeverRefused) else None)
    for i, step in enumerate(steps, 1):
        say(f"[{i}/{len(steps)}] {step.label}: {step.caption}")
        refused.clear()
        servers.set_lever("batch", step.levers.batch)
        if len(servers.clients) > 1:
            servers.set_lever("server", step.server)
        run_ids: list[int] = []
        for _ in range(step.runs if not refused else 0):
            fin = await servers.run(step.request())
            if fin is None or fin.stop_reason not in FINISHED:
                say(f"    run failed: {fin.stop_reason if fin else 'no run'}")
                continue
            run_ids.append(fin.run_id)
        say("    → " + log.record(session, step, run_ids, refused).effect())
    say("")
    for line in log.summary():
        say(line)
    return log


def run_headless_tour(args, steps: list[TourStep]) -> int:
    recorder = open_recording(args)
    session = Session(recorder=recorder)
    try:
        engine = load_engine(args, session)
        if engine is None:
            return EXIT_USAGE
        r = session.ready
        print(f"{r.model} on {r.device} ({r.dtype}), a tour of {len(fitting(steps, r.thinks, bool(r.routing))[0])} steps", flush=True)
        log = run_tour(engine, session, steps, say=lambda line: print(line, flush=True))
    finally:
        if recorder is not None:
            recorder.close()
    return 0 if all(r.figures is not None and not r.refused for r in log.results.values()) else 1
