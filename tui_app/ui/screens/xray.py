"""`x`: the X-ray of a run: its requests as a waterfall, the client's chunks over the server's phases."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from tui_app.attach.otlp import server_flags

KEYS = " ←/→ run  ↑/↓ stream  escape close"


class XrayScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,x,q", "dismiss", "close"),
        Binding("left", "run(-1)", "previous run"),
        Binding("right", "run(1)", "next run"),
        Binding("up", "stream(-1)", "previous stream"),
        Binding("down", "stream(1)", "next stream"),
    ]
    DEFAULT_CSS = """
    XrayScreen { background: $surface; }
    XrayScreen > #xray-title { height: auto; background: $panel; padding: 0 1; }
    XrayScreen > #xray-keys { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, session, waterfall):
        """`waterfall`: the widgets/waterfall.py pane of the run to show first (the app makes it)."""
        super().__init__()
        self.session = session
        self.waterfall = waterfall
        self.title_line = Static("", id="xray-title")

    def compose(self) -> ComposeResult:
        yield self.title_line
        yield self.waterfall
        yield Static(KEYS, id="xray-keys")

    def on_mount(self) -> None:
        self._show()
        self.set_interval(0.5, self._follow)

    def _follow(self) -> None:
        """Spans come after their streams end (a server batches them): redraw when the book changed."""
        if self.session.xray.version != self.waterfall.seen:
            self._show()

    def _show(self) -> None:
        run_id = self.waterfall.run_id
        reqs = self.waterfall.requests()
        status = self.session.xray.status
        spans = sum(1 for r in reqs if r.server is not None and r.server.source == "otlp")
        timed = sum(1 for r in reqs if r.server is not None and r.server.phases)
        parts = [f"X-ray · run {run_id} · {len(reqs)} stream{'s' if len(reqs) != 1 else ''}"]
        if status is not None:
            endpoint = f"http://{status.address}/v1/traces"
            parts.append(f"OTLP at {status.address}: {spans}/{len(reqs)} with a server span, {status.spans} spans in all, {status.others} of other clients")
            if status.rejected:
                parts.append("rejected: " + ", ".join(f"{n} {why}" for why, n in sorted(status.rejected.items())))
            if not status.spans:
                parts.append(server_flags(endpoint))
        else:
            parts.append(f"{timed}/{len(reqs)} with the server's own timings (attach --otlp joins its spans)")
        parts.append("clock: durations are the server's, placed from the client's send")
        self.title_line.update(" · ".join(parts))
        self.waterfall.dirty = True
        self.waterfall.redraw()

    def action_run(self, by: int) -> None:
        ids = self.session.xray.run_ids()
        if not ids:
            return
        at = ids.index(self.waterfall.run_id) if self.waterfall.run_id in ids else len(ids) - 1
        self.waterfall.run_id = ids[max(0, min(at + by, len(ids) - 1))]
        self.waterfall.selected = 0
        self._show()

    def action_stream(self, by: int) -> None:
        n = len(self.waterfall.requests())
        if n:
            self.waterfall.selected = max(0, min(self.waterfall.selected + by, n - 1))
            self._show()

    def action_dismiss(self) -> None:
        self.app.pop_screen()
