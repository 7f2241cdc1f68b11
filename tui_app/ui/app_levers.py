"""The keys that act on the engine: the levers, the prompt, runs started, paused and repeated,
the engine's profiles and its restart. Each sends a typed command (tui_app/requests.py) or says
in one line why it cannot.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from monitors.events import cycled, next_lever_value
from tui_app.requests import History, Pause, Probe, Profile, SetLever
from tui_app.ui import status_text
from tui_app.ui.app_state import AppState
from tui_app.ui.screens.confirm import ConfirmScreen
from tui_app.ui.screens.prompt import PromptScreen

ANATOMY_STEPS = 8  # the p key's window: enough steps for a stable mean, few enough that the slowed steps pass in a second
HISTORY_RUNS = 3  # the H key's window: enough for a leak's step to repeat, and a dump of seconds


class LeverKeys(AppState):
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
        self.running = self.paused = False  # a new engine starts unpaused: the next space pauses it
        self.source.restart(self.session.levers, first_run_id=self.session.next_run_id)
        self.session.fatal = None
        self._follow()

    def _auto_next(self) -> None:
        if self.auto and not self.running and not self.paused:
            if len(self.session.servers) > 1:  # compared servers take turns on the same prompt
                self.action_next_server()
            self.start_run()
