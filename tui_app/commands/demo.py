"""`tokentop demo [SCRIPT.toml]`: the tour (tour.py) run live in the TUI, captioned, or with
--no-tui printed step by step, so a script can be checked before going on stage.

In the TUI the tour is a small driver on top of the normal app: it sends the same lever and run
commands the keys send, and every key still works. `space` pauses the tour (not the generation),
→/← move between steps, and a lever key takes the tour off its script until →.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType

from monitors.events import EngineError, LeverRefused, RunFinished, RunStarted
from monitors.record import RecordError

# bench's lever order (back to plain, then on) is one no engine refuses; the TUI sends it as commands.
from tui_app.commands.bench import _APPLY_ORDER, _RESET_ORDER, apply_levers
from tui_app.commands.run import load_engine
from tui_app.core.options import EXIT_USAGE, UsageError, bounded, make_recorder
from tui_app.core.session import Session
from tui_app.core.tour import LEVERS, TourError, TourLog, TourStep, default_tour, load_tour, server_tour
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.caption import CaptionBanner

FINISHED = ("eos", "max tokens")  # a stopped or failed run is not a measurement of its step


def add_demo_args(p) -> None:
    p.add_argument("script", nargs="?", default=None, help="a tour script (TOML, [[step]] tables; see docs/demo.md); default: the built-in tour")
    p.add_argument("--no-tui", action="store_true", help="print each step's caption and measured effect instead of drawing the TUI")
    p.add_argument("--tokens", type=bounded(int, 1), default=None, help="new tokens per run in every step (default: each step's own)")
    p.add_argument("--hold", type=bounded(float, 0), default=None, help="seconds each step's effect stays on screen (default: each step's own)")
    p.add_argument("--report", metavar="FILE", default=None, help="after the tour, write its recording as a report (HTML, as `tokentop report` writes)")


def tour_steps(args) -> list[TourStep]:
    if args.tokens is not None and args.tokens < 1:
        raise UsageError(f"--tokens must be at least 1 (got {args.tokens})")
    if args.hold is not None and args.hold < 0:
        raise UsageError(f"--hold must not be negative (got {args.hold})")
    try:
        return load_tour(args.script, args.tokens, args.hold) if args.script else default_tour(args.tokens, args.hold)
    except TourError as exc:
        raise UsageError(str(exc)) from None


def demo_main(args, tui) -> int:
    steps = tour_steps(args)  # a bad script is refused before any model loads
    if args.no_tui:
        return run_headless_tour(args, steps)
    return _tui_tour(args, steps, tui)


def attach_demo(args, tui) -> int:
    """`tokentop attach URL [URL ...] --demo`: the server tour (tour.server_tour) on those servers."""
    from tui_app.commands.attach import attach_configs, attach_source, choose_urls

    configs = attach_configs(args, choose_urls(args))
    steps = server_tour(len(configs))
    if args.no_tui:
        return asyncio.run(_headless_server_tour(args, configs, steps))
    return _tui_tour(args, steps, tui, attach_source(configs))


def _tui_tour(args, steps: list[TourStep], tui, source=None) -> int:
    apps: list[DemoApp] = []

    def make(args, source, recorder) -> DemoApp:
        from monitors.sampler import Sampler

        app = DemoApp(steps, source, recorder=recorder, sampler=Sampler(hz=args.hz or 4.0), fps=args.fps, ascii=args.ascii)
        apps.append(app)
        return app

    code = tui(args, source, make=make)
    if apps and apps[0].tour_log.results:
        print("\n".join(apps[0].tour_log.summary()))
    return code


# ---------------------------------------------------------------- headless
def run_tour(engine, session: Session, steps: list[TourStep], say=print) -> TourLog:
    """Each step's levers set on an in-process engine, its runs, its measured effect; then the summary."""
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


async def _headless_server_tour(args, configs, steps: list[TourStep]) -> int:
    from tui_app.commands.attach import connected

    async with connected(args, configs) as (servers, session):
        print(f"a tour of {len(steps)} steps on {len(configs)} server{'s' if len(configs) > 1 else ''}", flush=True)
        log = await run_server_tour(servers, session, steps, say=lambda line: print(line, flush=True))
    return 0 if all(r.figures is not None and not r.refused for r in log.results.values()) else 1


def run_headless_tour(args, steps: list[TourStep]) -> int:
    try:
        recorder = make_recorder(args)
    except RecordError as exc:
        raise UsageError(str(exc)) from None
    session = Session(recorder=recorder)
    try:
        engine = load_engine(args, session)
        if engine is None:
            return EXIT_USAGE
        r = session.ready
        print(f"{r.model} on {r.device} ({r.dtype}), a tour of {len(steps)} steps", flush=True)
        log = run_tour(engine, session, steps, say=lambda line: print(line, flush=True))
    finally:
        if recorder is not None:
            recorder.close()
    return 0 if all(r.figures is not None and not r.refused for r in log.results.values()) else 1


# ---------------------------------------------------------------- TUI
class DemoApp(TokentopApp):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "tour_pause", "pause tour"),
        Binding("right", "tour_step(1)", "next step"),
        Binding("left", "tour_step(-1)", "previous step"),
        *(b for b in TokentopApp.BINDINGS if not (isinstance(b, Binding) and b.key == "space")),
    ]

    def __init__(self, steps: list[TourStep], source, *, recorder=None, sampler=None, fps: float | str = 8.0, out_dir: str | None = None, ascii: bool = False):
        super().__init__(source, steps[0].request(), recorder=recorder, sampler=sampler, fps=fps, out_dir=out_dir, ascii=ascii)
        self.steps = steps
        self.tour_log = TourLog(steps)
        self.step_index = -1
        self.step_runs: list[int] = []
        self.step_refused: list[str] = []
        self.step_done = False
        self.tour_paused = False
        self.off_script = False
        self.tour_done = False
        self.last_effect = ""
        self._advance = None

    def compose(self) -> ComposeResult:
        self.banner = CaptionBanner(id="caption")
        yield self.banner
        yield from super().compose()

    def tick(self) -> None:
        super().tick()
        self.banner.redraw()

    def start_run(self) -> None:
        if self.step_index < 0:  # the engine is ready: the tour begins
            self.goto(0)
            return
        super().start_run()

    # ------------------------------------------------------------ the tour
    def goto(self, i: int) -> None:
        if self._advance is not None:
            self._advance.stop()
            self._advance = None
        if i >= len(self.steps):
            self.finish()
            return
        i = max(0, i)
        step = self.steps[i]
        self.step_index, self.step_runs, self.step_refused = i, [], []
        self.step_done = self.off_script = self.tour_done = False
        if self.running:
            self.source.send("stop")
        if step.server:  # attached to servers: the client's levers only
            self.source.send("lever", "batch", step.levers.batch)
            if any(s.server > 1 for s in self.steps):
                self.source.send("lever", "server", step.server)
        else:
            for name, value in (*_RESET_ORDER, *((name, getattr(step.levers, name)) for name in _APPLY_ORDER)):
                self.source.send("lever", name, value)
        self.request = step.request()
        self._run()
        self.show()

    def _run(self) -> None:
        # Not start_run: it would send a second stop, which could reach the run just asked for.
        self.source.send("run", self.request)
        self.running = True

    def finish(self) -> None:
        self.tour_done = True
        if self.running:
            self.source.send("stop")
        self.state = "tour done: ← goes back a step, q quits"
        title = f"tour done: {len(self.tour_log.results)} of {len(self.steps)} steps measured"
        self.banner.show_table(title, self.tour_log.summary(), "← back a step · q quit")

    def show(self) -> None:
        if self.tour_done or self.step_index < 0:  # before the engine is ready there is no step to show
            return
        step = self.steps[self.step_index]
        keys = "→ next · ← previous · space pause"
        note = "off script: → resumes the tour" if self.off_script else "tour paused: space resumes" if self.tour_paused else keys
        levers = f"server {step.server}, {step.levers.batch} stream{'s' if step.levers.batch > 1 else ''}" if step.server else step.levers.label()
        title = f"step {self.step_index + 1}/{len(self.steps)}: {step.label} [{levers}, {(step.prompt and 'own prompt') or step.preset}]"
        self.banner.show(title, step.caption, self.last_effect, note)

    def _on_event(self, ev) -> None:
        super()._on_event(ev)
        if self.step_index < 0 or self.off_script or self.tour_done or self.step_done:
            return
        step = self.steps[self.step_index]
        if isinstance(ev, RunStarted) and len(self.step_runs) < step.runs:
            self.step_runs.append(ev.run_id)
        elif isinstance(ev, LeverRefused):
            self.step_refused.append(f"{ev.lever}: {ev.reason}")
        elif isinstance(ev, RunFinished) and ev.run_id in self.step_runs:
            if ev.stop_reason not in FINISHED:
                self.step_runs.remove(ev.run_id)
            elif len(self.step_runs) < step.runs:
                self._run()
            else:
                self.end_step()

    def end_step(self) -> None:
        step = self.steps[self.step_index]
        self.step_done = True
        self.last_effect = self.tour_log.record(self.session, step, self.step_runs, self.step_refused).effect()
        self.show()
        self._advance = self.set_timer(max(step.seconds, 0.05), self._auto_advance)

    def _auto_advance(self) -> None:
        self._advance = None
        if not self.tour_paused and not self.off_script:
            self.goto(self.step_index + 1)

    # ------------------------------------------------------------ keys
    def action_tour_pause(self) -> None:
        self.tour_paused = not self.tour_paused
        if not self.tour_paused and self.step_done and self._advance is None and not self.off_script:
            self.goto(self.step_index + 1)
        self.show()

    def action_tour_step(self, delta: int) -> None:
        if self.step_index < 0:
            return
        self.goto(len(self.steps) - 1 if self.tour_done and delta < 0 else self.step_index + delta)

    def action_lever(self, name: str) -> None:
        self._leave_script()
        super().action_lever(name)

    def action_preset(self) -> None:
        self._leave_script()
        super().action_preset()

    def action_new_prompt(self) -> None:
        self._leave_script()
        super().action_new_prompt()

    def _leave_script(self) -> None:
        if self.step_index >= 0 and not self.tour_done:
            self.off_script = True
            self.show()
