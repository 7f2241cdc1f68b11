"""TokentopApp: layout, key bindings → actions, events → widgets.

The app is a view. It drains the engine's event queue once per frame (never per token), feeds
the events to the Session, and redraws only the panes whose data changed, at --fps at most.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import BindingType
from textual.screen import Screen

from monitors.events import (
    Anatomy,
    EngineError,
    EngineReady,
    LeverChanged,
    LeverRefused,
    Phase,
    RunFinished,
    RunStarted,
    Step,
    cycled,
    next_lever_value,
)
from monitors.files import write_whole
from monitors.system import trim_heap
from tui_app.core.export import export_session
from tui_app.core.session import Session
from tui_app.core.sources import EventSource
from tui_app.process import yield_to_children
from tui_app.requests import Confidence, History, Pause, Probe, Profile, Run, SetLever, Stop
from tui_app.ui import status_text
from tui_app.ui.frames import FramePacer, PacedApp
from tui_app.ui.look import Look
from tui_app.ui.palette import KEYS, KeyCommands
from tui_app.ui.screens.anatomy import AnatomyScreen
from tui_app.ui.screens.confirm import ConfirmScreen
from tui_app.ui.screens.help import HelpScreen
from tui_app.ui.screens.ledger import LedgerScreen
from tui_app.ui.screens.monitor import MonitorScreen
from tui_app.ui.screens.prompt import PromptScreen
from tui_app.ui.screens.xray import XrayScreen
from tui_app.ui.widgets.waterfall import Waterfall

ANATOMY_STEPS = 8  # the p key's window: enough steps for a stable mean, few enough that the slowed steps pass in a second
HISTORY_RUNS = 3  # the H key's window: enough for a leak's step to repeat, and a dump of seconds


class TokentopApp(PacedApp):
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
        events = self.source.drain()
        sampled = self.sampler.fresh() if self.sampler is not None else None
        events += [sampled] if sampled is not None else []
        for ev in events:
            self.session.feed(ev)
            self._on_event(ev)
        self.monitor.flush_text()
        death = self.source.death()
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
                self.set_timer(0.3, self._auto_next)
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

    def _watching(self) -> bool:
        """Attached with --watch (no request to run): said, where the source is live."""
        if self.request is None and self.source.live:
            self.notify("--watch: tokentop sends no request of its own; leave out --watch to run prompts", severity="warning")
        return self.request is None

    def _recording_stopped(self, line: str) -> None:
        self.session.say(line, error=True)
        self.notify(line, title="recording", severity="error", timeout=30)

    def _auto_next(self) -> None:
        if self.auto and not self.running and not self.paused:
            if len(self.session.servers) > 1:  # compared servers take turns on the same prompt
                self.action_next_server()
            self.start_run()

    def start_run(self) -> None:
        if self.request is None or not self.source.live:
            return
        if self.running:
            self.source.send(Stop())
        self.source.send(Run(self.request))
        self.running = True

    def action_lever(self, name: str) -> None:
        if not self.source.live:
            self.notify("replay shows recorded levers; they cannot be switched", title=f"{name} refused", severity="warning")
            return
        server = self.session.ready.server if self.session.ready else None  # its streams are the batch lever
        self._set_lever(name, next_lever_value(name, self._wanted.get(name, getattr(self.session.levers, name)), server and tuple(server["concurrency"])))

    def _set_lever(self, name: str, value) -> None:
        self._wanted[name] = value
        self.source.send(SetLever(name, value))
        if not self.running:  # answered now; the engine's LeverChanged or LeverRefused follows
            self.state = status_text.for_next_run(name, value)

    @property
    def own_engine(self) -> bool:
        """Whether the source is a live engine of tokentop's own kind (not a replay, not a server)."""
        return self.source.live and not (self.session.ready is not None and self.session.ready.server)

    def action_probe(self) -> None:
        if not self.own_engine:
            self.notify(
                "tokentop measures the memory read rate of its own engine only (not a replay's or a server's)", title="bandwidth refused", severity="warning"
            )
            return
        self.source.send(Probe())
        self.state = "measuring the memory read rate" + (" at the next token" if self.running else "")

    def action_anatomy(self, steps: int = ANATOMY_STEPS) -> None:
        """The engine profiles the next decode steps (idle: of a run started for them); their anatomy
        opens when it comes (`_on_event`)."""
        path = self._own_engine_file("the anatomy", "the step's trace", "trace", "json")
        if path is not None:
            self.source.send(Profile(str(path), steps))
            if not self.running:
                self.start_run()
            self.state = f"profiling the next {steps} decode steps"

    def _own_engine_file(self, what: str, file_what: str, kind: str, ext: str):
        """A stamped path in the output folder for a file the engine writes, or None (said why):
        only tokentop's own live engine writes one, and the folder must take it."""
        from tui_app.folders import FolderError, recordings_dir, require, stamped

        if not self.own_engine:
            self.notify(f"{what} is tokentop's own engine's (not a replay's or a server's)", title=f"{kind} refused", severity="warning")
            return None
        try:
            folder = require(Path(self.out_dir) if self.out_dir else recordings_dir(), file_what, "--out-dir or TOKENTOP_DATA")
        except FolderError as exc:
            self.notify(str(exc), severity="error", timeout=15)
            return None
        return stamped(folder, kind, ext)

    def action_history(self) -> None:
        """The engine records the CUDA allocator's history for the next runs and saves it in the
        output folder; the memory pane shows it recording, then the file's path."""
        path = self._own_engine_file("the allocator history", "the allocator history", "cuda-history", "pickle")
        if path is not None:
            self.source.send(History(str(path), HISTORY_RUNS))

    def action_next_server(self) -> None:
        labels = list(self.session.servers)
        if len(labels) < 2:
            self.notify("t moves between attached servers: tokentop attach URL_A URL_B compares two", title="server refused", severity="warning")
            return
        self._set_lever("server", cycled(labels, self._wanted.get("server", self.session.levers.server)))

    def action_preset(self) -> None:
        if self.request is None:
            return
        presets = ["short", "long"] + (["file"] if self.prompt_file else [])
        self.request = replace(self.request, prompt=None, preset=cycled(presets, self.request.preset))
        if self.running:  # a prompt cannot change mid-run: the run starts again on the new one
            self.notify(f"prompt {self.request.preset}: run {self._current_id()} stopped, a new run starts")
            self.start_run()
        else:  # as a lever pressed while idle
            self.state = f"prompt {self.request.preset} for the next run (r starts it)"

    def action_new_prompt(self) -> None:
        if self._watching():
            return

        def done(text: str | None) -> None:
            if text:
                self.request = replace(self.request, prompt=text, preset="custom")
                self.start_run()

        self.push_screen(PromptScreen(), done)

    def _current_id(self) -> int | str:
        cur = self.session.current
        return cur.started.run_id if cur is not None else "?"

    def action_rerun(self) -> None:
        if not self.source.live:
            self.notify("a replay cannot run the prompt again")
            return
        if self._watching():
            return
        if self.running:
            self.notify(f"run {self._current_id()} stopped; the prompt runs again")
        self.start_run()

    def action_pause(self) -> None:
        if not self.source.can_pause:
            self.source.send(Pause())  # the source says why not
            return
        if self.source.step_mode:  # a replay a step at a time: space releases the next
            self.source.advance()
            return
        self.paused = not self.paused
        self.source.pause(self.paused)
        self.state = "paused" if self.paused else ("generating" if self.running else "idle")

    def action_auto(self) -> None:
        self.auto = not self.auto
        self.notify(f"auto-repeat {'on' if self.auto else 'off'}")
        self._auto_next()

    def action_next_view(self) -> None:
        if why_not := self.monitor.next_view():
            self.notify(why_not)

    def action_leak_view(self) -> None:
        self.monitor.leak_view()
        self.monitor.redraw(self.running, force=True)

    def action_colouring(self) -> None:
        before = self.monitor.tokens.colouring
        colouring = self.monitor.tokens.next_colouring()
        said = f"tokens coloured: {colouring}"
        if "confidence" in (colouring, before):  # the engine measures it only while it is shown: a softmax a step
            own = self.own_engine
            if own:
                self.source.send(Confidence(on=colouring == "confidence"))
            if colouring == "confidence":
                said += " from the next token" if own else "; measured by tokentop's own engine only (a replay shows what was recorded)"
        self.notify(said)
        self.monitor.redraw(self.running, force=True)

    def action_ledger(self) -> None:
        self.push_screen(LedgerScreen(self.session))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_xray(self) -> None:
        ids = self.session.xray.run_ids()
        if not ids:
            self.notify("the X-ray shows the requests of an attached server's runs (tokentop attach URL), once one has run")
            return
        self.push_screen(XrayScreen(self.session, Waterfall(self.session, ids[-1], id="waterfall")))

    def action_restart(self) -> None:
        if not self.source.restartable:
            self.notify("a replay has no engine to restart" if not self.source.live else "tokentop does not run a script again; start it again yourself")
            return
        if self.session.fatal is None and self.source.alive():
            self.push_screen(
                ConfirmScreen(status_text.restart_question(self.session)), lambda yes: self._restart() if yes else self.notify("engine not restarted")
            )
            return
        self._restart()

    def _restart(self) -> None:
        """A new engine process, its runs numbered on: ids stay unique in the table, export and recording."""
        self.state = "restarting engine…"
        self.session.engine_died("restarting", why="stopped by the engine restart")
        self.running = False
        self.source.restart(self.session.levers, first_run_id=self.session.next_run_id)
        self.session.fatal = None
        self._follow()

    def action_save(self, kind: str) -> None:
        """The session as JSON (export) or the screen as SVG (screenshot), into the output folder."""
        from tui_app.folders import FolderError, write_stamped

        if kind == "export":
            what, ext, write, told = "the export", "json", lambda path: export_session(self.session, str(path)), "session exported to"
        else:
            what, ext, write, told = "the screenshot", "svg", lambda path: write_whole(path, self.export_screenshot()), "screenshot saved to"
        try:
            self.notify(f"{told} {write_stamped(self.out_dir, what, kind, ext, write)}")
        except FolderError as exc:
            self.notify(str(exc), severity="error", timeout=15)

    def on_unmount(self) -> None:
        self.restore_signals()
        if self.sampler is not None:
            self.sampler.stop()
        self.source.close()
        if self.session.recorder is not None:
            self.session.recorder.close()
