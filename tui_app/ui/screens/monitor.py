"""The app's screen: the status line, the text, the four charts, the runs table and the keys, laid
out wide, narrow or tiny by the terminal's size (app.tcss). The app keeps references to the panes,
not queries: with a modal open, queries search the modal's screen."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from tui_app.ui.widgets.key_bar import KeyBar
from tui_app.ui.widgets.kv_chart import KVChart
from tui_app.ui.widgets.latency_chart import LatencyChart
from tui_app.ui.widgets.memory_chart import MemoryChart
from tui_app.ui.widgets.runs_table import RunsTable
from tui_app.ui.widgets.server_pane import ServerPane
from tui_app.ui.widgets.status_bar import StatusBar
from tui_app.ui.widgets.token_stream import TokenStream
from tui_app.ui.widgets.util_chart import UtilChart

CHARTS = ("latency", "kv", "memory", "util")
NARROW_W, NARROW_H = 120, 34
TINY_W, TINY_H = 60, 16


class MonitorScreen(Screen):
    def __init__(self, session, server: bool, above: Iterable[Widget] = ()):
        """`server`: an attached server's figures in the KV pane (its cache is not ours to measure);
        `above`: widgets over the status line (the demo's caption)."""
        super().__init__()
        self.above = list(above)
        self.status = StatusBar(id="status")
        self.tokens = TokenStream(id="tokens")
        self.charts = [
            LatencyChart(session, id="latency"),
            ServerPane(session, id="kv") if server else KVChart(session, id="kv"),
            MemoryChart(session, id="memory"),
            UtilChart(session, id="util"),
        ]
        self.panes = {w.id: w for w in (self.tokens, RunsTable(session, id="runs"), *self.charts)}
        self.key_bar = KeyBar(id="keys")
        self.mode = ""  # wide, narrow or tiny, once laid out
        self.view = 0  # the chart shown where only one fits

    def compose(self) -> ComposeResult:
        yield from self.above
        yield self.status
        with Horizontal(id="main"):
            yield self.tokens
            with Container(id="charts"):
                yield from self.charts
        yield self.panes["runs"]  # full width: its columns are the comparison the levers exist for
        yield Static(f"terminal too small for the charts: enlarge it ({TINY_W}×{TINY_H} or more)", id="tiny-note")
        yield self.key_bar

    def fit(self, width: int, height: int) -> None:
        """The layout for this size; cheap when its class (wide, narrow, tiny) is unchanged."""
        mode = "tiny" if (width < TINY_W or height < TINY_H) else "narrow" if (width < NARROW_W or height < NARROW_H) else "wide"
        if mode == self.mode:
            return
        self.mode = mode
        self.set_class(mode == "tiny", "-tiny")
        self.set_class(mode != "wide", "-narrow")
        self.show_view()
        if self.key_bar.is_mounted:
            self.key_bar.draw()  # v shows where it does something

    def show_view(self) -> None:
        single = self.mode != "wide"
        for i, name in enumerate(CHARTS):
            chart = self.panes[name]
            chart.display = (not single) or i == self.view
            chart.dirty = True

    def next_view(self) -> None:
        self.view = (self.view + 1) % len(CHARTS)
        self.show_view()
