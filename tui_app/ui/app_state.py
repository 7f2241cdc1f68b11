"""What the app's key handlers share: the state the app holds (declared here, set by
`TokentopApp.__init__`) and the few moves every handler makes: start a run, ask whether the
source is tokentop's own engine, refuse a run request where there is no request to run.
"""

from __future__ import annotations

from tui_app.core.session import Session
from tui_app.core.sources import EventSource
from tui_app.requests import Run, RunRequest, Stop
from tui_app.ui.frames import PacedApp
from tui_app.ui.screens.monitor import MonitorScreen


class AppState(PacedApp):
    source: EventSource
    session: Session
    request: RunRequest | None  # None: attached with --watch, or a replay
    monitor: MonitorScreen
    running: bool
    paused: bool
    auto: bool
    state: str  # the status line's sentence
    prompt_file: str | None
    out_dir: str | None
    _wanted: dict[str, object]  # levers asked for, until the engine answers

    def start_run(self) -> None:
        if self.request is None or not self.source.live:
            return
        if self.running:
            self.source.send(Stop())
        self.source.send(Run(self.request))
        self.running = True

    @property
    def own_engine(self) -> bool:
        """Whether the source is a live engine of tokentop's own kind (not a replay, not a server)."""
        return self.source.live and not (self.session.ready is not None and self.session.ready.server)

    def _watching(self) -> bool:
        """Attached with --watch (no request to run): said, where the source is live."""
        if self.request is None and self.source.live:
            self.notify("--watch: tokentop sends no request of its own; leave out --watch to run prompts", severity="warning")
        return self.request is None

    def _current_id(self) -> int | str:
        cur = self.session.current
        return cur.started.run_id if cur is not None else "?"
