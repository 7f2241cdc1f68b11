"""The demo's app (`tokentop demo`, `attach --demo`): the tour (core/tour.py) as a small driver on top
of the normal app, captioned. It sends the same lever and run commands the keys send, and every key
still works: `space` pauses the tour (not the generation), →/← move between steps, and a lever key
takes the tour off its script until →."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual.binding import Binding, BindingType

from monitors.events import LeverRefused, RunFinished, RunStarted
from tui_app.core.tour import FINISHED, TourLog, TourStep, fitting, lever_settings
from tui_app.requests import Run, SetLever, Stop
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.caption import CaptionBanner


class DemoApp(TokentopApp):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "tour_pause", "pause tour"),
        Binding("right", "tour_step(1)", "next step"),
        Binding("left", "tour_step(-1)", "previous step"),
        *(b for b in TokentopApp.BINDINGS if not (isinstance(b, Binding) and b.key == "space")),
    ]

    def __init__(self, steps: list[TourStep], source, *, recorder=None, sampler=None, fps: float | str = 8.0, out_dir: str | None = None, look=None):
        super().__init__(source, steps[0].request(), recorder=recorder, sampler=sampler, fps=fps, out_dir=out_dir, look=look)
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
        self._advance: asyncio.TimerHandle | None = None
        self.banner = CaptionBanner(id="caption")
        self.above_status = [self.banner]

    def tick(self, first: bool = False) -> None:
        super().tick(first)
        self.banner.redraw()

    def start_run(self) -> None:
        if self.step_index < 0:  # the engine is ready: the tour begins, with the steps this model can show
            ready = self.session.ready
            self.steps, left = fitting(self.steps, bool(ready and ready.thinks), bool(ready and ready.routing))
            self.tour_log = TourLog(self.steps)
            if left:
                self.notify(left)
            self.goto(0)
            return
        super().start_run()

    # ------------------------------------------------------------ the tour
    def goto(self, i: int) -> None:
        if self._advance is not None:
            self._advance.cancel()
            self._advance = None
        if i >= len(self.steps):
            self.finish()
            return
        i = max(0, i)
        step = self.steps[i]
        self.step_index, self.step_runs, self.step_refused = i, [], []
        self.step_done = self.off_script = self.tour_done = False
        if self.running:
            self.source.send(Stop())
        if step.server:  # attached to servers: the client's levers only
            self.source.send(SetLever("batch", step.levers.batch))
            if any(s.server > 1 for s in self.steps):
                self.source.send(SetLever("server", step.server))
        else:
            for name, value in lever_settings(step.levers):
                self.source.send(SetLever(name, value))
        self.request = step.request()
        self._run()
        self.show()

    def _run(self) -> None:
        # Not start_run: it would send a second stop, which could reach the run just asked for.
        self.source.send(Run(self.request))
        self.running = True

    def finish(self) -> None:
        self.tour_done = True
        if self.running:
            self.source.send(Stop())
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
        self._advance = self.call_in(max(step.seconds, 0.05), self._auto_advance)

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
