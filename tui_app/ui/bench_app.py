"""The TUI over a running `tokentop bench --endpoint --live`: the attach app's panes, fed by the
bench's own requests; the status line keeps the bench's progress (its bar, the cell, the time left)
in place of a single run's state, and the app closes itself once the bench is done, so its tables
print (tui_app/commands/serving/live.py)."""

from __future__ import annotations

from monitors.events import Phase
from tui_app.ui.app import TokentopApp

CLOSE_AFTER_S = 2.0  # the last picture stays this long before the tables


class BenchApp(TokentopApp):
    def _on_event(self, ev) -> None:
        super()._on_event(ev)
        phase = self.session.phase
        if phase is None or phase.name != "bench":
            return
        # Many requests start and end at once: the line would flicker between them, so it says the bench's state.
        self.state = f"bench {phase.detail}"
        if isinstance(ev, Phase) and ev.done:
            code = getattr(self.source, "bench_code", lambda: None)()
            self.call_in(CLOSE_AFTER_S, lambda: self.exit(return_code=code or 0))

    def start_run(self) -> None:
        self.notify("the bench sends its own load; r and a wait for it to end", severity="warning")
