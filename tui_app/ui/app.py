"""TokentopApp: layout, events → widgets; its keys are two wings, app_levers.py (what runs) and
app_views.py (what is shown), over the state they share (app_state.py).

The app is a view. It drains the engine's event queue once per frame (never per token), feeds
the events to the Session, and redraws only the panes whose data changed, at --fps at most.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import BindingType
from textual.screen import Screen

from monitors.events import (
    Anatomy,
    EngineError,
    EngineReady,
    ExpertLoad,
    LeverChanged,
    LeverRefused,
    Phase,
    RunFinished,
    RunStarted,
    Step,
)
from monitors.system import trim_heap
from tui_app.core.session import Session
from tui_app.core.sources import EventSource
from tui_app.process import yield_to_children
from tui_app.requests import Confidence
from tui_app.ui import status_text
from tui_app.ui.app_levers import LeverKeys
from tui_app.ui.app_views import ViewKeys
from tui_app.ui.frames import FramePacer
from tui_app.ui.look import Look
from tui_app.ui.palette import KEYS, KeyCommands
from tui_app.ui.screens.anatomy import AnatomyScreen
from tui_app.ui.screens.experts import ExpertsScreen
from tui_app.ui.screens.ledger import LedgerScreen
from tui_app.ui.screens.monitor import MonitorScreen


class TokentopApp(LeverKeys, ViewKeys):
    # A path of its own: Textual reads a relative one beside the subclass (the demo's app lives in commands/).
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "tokentop"
    ENABLE_COMMAND_PALETTE = True
    COMMANDS = App.COMMANDS | {KeyCommands}
    BINDINGS: ClassVar[list[BindingType]] = KEYS

    def __init__(
        self,
        source: EventSource,
        request=None,
        *,
        recorder=None,
        sampler=None,
        fps: float | str = 8.0,
        auto: bool = False,
        prompt_file: str | None = None,
        out_dir: str | None = None,
        history: int = 4000,
        look: Look | None = None,
        profile_steps: int | None = None,
    ):
        super().__init__(look=look)
        self.profile_steps = profile_steps  # --profile-steps: the first run's first decode steps, profiled
        self.source = source
        self.request = request
        self.sampler = sampler
        self.pacer = FramePacer(self, fps)  # --fps: a number, or "auto" (frames.py)
        self.auto = auto
        self.prompt_file = prompt_file
        self.out_dir = out_dir  # None: the recordings folder (TOKENTOP_DATA moves it)
        self.session = Session(recorder=recorder, history=history)
        if recorder is not None:  # a full disk: said here, in the status bar, never on the terminal under the TUI
            recorder.on_stop = self._recording_stopped
        self.running = False
        self.paused = False
        self.state = "starting engine…"
        self._wanted: dict[str, object] = {}
        self._phase_since: float | None = None  # when the phase in progress began, on this clock
        self.told: deque[str] = deque(maxlen=50)  # what notify() said, for tests and export
        self.above_status: list = []  # widgets over the status line (the demo's caption)

    def notify(self, message: str, **kwargs) -> None:
        self.told.append(message)
        super().notify(message, **kwargs)

    def get_default_screen(self) -> Screen:
        self.monitor = m = MonitorScreen(self.session, kind=self.source.kind, above=self.above_status, present=self.look.present)
        self.status, self.tokens, self.panes, self.key_bar = m.status, m.tokens, m.panes, m.key_bar
        return m

    def on_mount(self) -> None:
        self.source.start()
        self._follow()
        if self.sampler is not None:
            self.sampler.start()
        yield_to_children()
        self.pacer.start()
        self._apply_size()
        self.hang_up_on_signals()

    def on_resize(self) -> None:
        self._apply_size()

    def _apply_size(self) -> None:
        if self.screen_stack:
            self.monitor.fit(*self.size)

    def first_data_in(self) -> bool:
        """The first figures are drawn when they come (a server's first answer), not a frame later."""
        return self.session.ready is not None and (self.source.kind != "server" or bool(self.session.server))

    def feed(self) -> list:
        self._apply_size()  # cheap when the size class is unchanged; resize events do not always reach the App
        # The death is read before the drain: what a process sent before it ended is then all read
        # (a script's death waits for its last events) before its run is called cut off, where a
        # process ending between the two would have had its last run, finished, marked died.
        death = self.source.death()
        events = self.source.drain()
        sampled = self.sampler.fresh() if self.sampler is not None else None
        events += [sampled] if sampled is not None else []
        for ev in events:
            self.session.feed(ev)
            self._on_event(ev)
        self.monitor.flush_text()
        if death:
            self._engine_died(death)
        if not self.source.live and self.source.done and self.state != "replay finished":
            self.state = "replay finished"
        return events

    def tick(self, first: bool = False) -> None:
        self.feed()
        self.monitor.redraw(running=self.running, force=first)
        self.show_status()

    def show_status(self) -> None:
        state = status_text.with_clock(self.state, self.session.phase, self._phase_since, time.monotonic())
        preset = self.request.preset if self.request else "watch" if self.source.live else "replay"
        self.status.show(self.session, state, preset, self.auto, self._wanted, self.pacer.status_note())

    def _on_event(self, ev) -> None:
        self.monitor.show(ev)
        if isinstance(ev, Step):
            return
        self.state = status_text.after(ev, self.auto) or self.state
        if isinstance(ev, RunStarted):
            self.running = True
        elif isinstance(ev, RunFinished):
            self.running = False
            if isinstance(self.screen, AnatomyScreen | LedgerScreen):  # a roofline verdict, a ledger's run: at the run's end
                self.screen.show()
            self.session.trim()
            trim_heap()  # the UI's own RSS then tracks its live memory, which the soak checks stays flat
            if self.auto and not self.paused and self.source.live:
                self.call_in(0.3, self._auto_next)
        elif isinstance(ev, LeverChanged | LeverRefused):
            self._wanted.pop(ev.lever, None)
            if isinstance(ev, LeverChanged) and ev.lever == "server":
                self._follow()
        elif isinstance(ev, Phase):
            self._phase_since = None if ev.done else time.monotonic()
        elif isinstance(ev, Anatomy):
            if isinstance(self.screen, AnatomyScreen):
                self.screen.show()
            elif isinstance(self.screen, MonitorScreen):  # not over a modal the user opened meanwhile
                self.push_screen(AnatomyScreen(self.session))
        elif isinstance(ev, EngineReady):
            self.sub_title = status_text.subtitle(ev)
            self._follow()
            if self.monitor.tokens.colouring == "confidence" and self.own_engine:  # a restarted engine
                self.source.send(Confidence(on=True))
            if self.profile_steps and self.source.live and self.request is not None and not ev.server:
                self.action_anatomy(self.profile_steps)  # it starts the first run
                self.profile_steps = None
            if self.source.live and self.request is not None and not self.running:  # compared servers: one ready each
                self.start_run()
        elif isinstance(ev, EngineError) and (not self.session.current or self.session.current.finished is not None):
            self.running = False
        if isinstance(ev, ExpertLoad | EngineReady) and isinstance(self.screen, ExpertsScreen):
            self.screen.show()

    def _follow(self) -> None:
        """The memory pane and the leak detector follow the engine's process, or the active server's when it runs here."""
        server = self.session.active_server()
        if self.source.live and server is not None:
            self.source.server_pid = server.get("pid")
        if self.sampler is not None:
            self.sampler.watch("engine", self.source.pid)

    def _engine_died(self, message: str) -> None:
        self.running = False
        self.session.engine_died(message)
        again = self.source.restartable
        self.state = f"{message} — {'press R to restart' if again else 'q quits'}; finished runs are kept"
        self.tokens.add_mark(message, error=again)
        if again:
            self.notify(f"{message}. Press R to restart the engine.", title="engine", severity="error", timeout=15)
        else:
            self.notify(message, title="finished", timeout=15)
        self.monitor.mark("runs")

    def _recording_stopped(self, line: str) -> None:
        self.session.say(line, error=True)
        self.notify(line, title="recording", severity="error", timeout=30)

    def on_unmount(self) -> None:
        self.restore_signals()
        if self.sampler is not None:
            self.sampler.stop()
        self.source.close()
        if self.session.recorder is not None:
            self.session.recorder.close()
