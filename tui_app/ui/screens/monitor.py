"""The app's screen: the status line, the text, the four charts, the runs table and the keys, laid
out wide, narrow or tiny by the terminal's size (app.tcss). The app keeps references to the panes,
not queries: with a modal open, queries search the modal's screen."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from itertools import accumulate, groupby
from statistics import median

from textual.app import ComposeResult
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from monitors.events import EngineError, EngineReady, FleetReady, FleetSample, LeverChanged, LeverRefused, RunFinished, RunStarted, Sampled, ServerSample, Step
from monitors.phases import ANSWER, THINKING, TOOL
from monitors.text import plural
from tui_app.core import fmt
from tui_app.core.readings import short_value
from tui_app.ui.widgets.big_numbers import BigNumbers
from tui_app.ui.widgets.fleet_pane import FleetPane
from tui_app.ui.widgets.key_bar import KeyBar
from tui_app.ui.widgets.kv_chart import KVChart
from tui_app.ui.widgets.latency_chart import LatencyChart
from tui_app.ui.widgets.memory_chart import MemoryChart
from tui_app.ui.widgets.runs_table import RunsTable
from tui_app.ui.widgets.server_pane import ServerPane
from tui_app.ui.widgets.status_bar import StatusBar
from tui_app.ui.widgets.token_stream import TokenStream, heat, sureness
from tui_app.ui.widgets.util_chart import UtilChart

CHARTS = ("latency", "kv", "memory", "util")
NARROW_W, NARROW_H = 120, 34
TINY_W, TINY_H = 60, 16


class Phases:
    """A run's phases as the tokens pane marks them: where the answer begins (the first time with
    its TTFA) and a tool call, and each think span's line for folding, counting on while it grows."""

    def __init__(self, t0: int = 0):
        self.t0, self.phase = t0, ANSWER
        self.answered = False  # an answer after thinking was marked: later ones are marked without a TTFA
        self.tokens, self.first, self.last = 0, 0, 0  # the think span's tokens, its first and last step's t_ns

    def step(self, ev: Step, screen: MonitorScreen) -> None:
        if ev.phase != self.phase:
            screen.flush_text()  # the marks go between the phases' texts
            if self.phase == THINKING:
                screen.tokens.end_thinking(self.note())
            if ev.phase == ANSWER:
                screen.tokens.add_mark("answer" if self.answered else f"answer · TTFA {fmt.ms((ev.t_ns - self.t0) / 1e9)}")
                self.answered = True
            elif ev.phase == TOOL:
                screen.tokens.add_mark("tool call")
            else:
                self.tokens, self.first = 0, ev.t_ns
            self.phase = ev.phase
        if ev.phase == THINKING:
            self.tokens += ev.n_tokens
            self.last = ev.t_ns
            screen.tokens.thinking_note = self.note()

    def note(self) -> str:
        return f"thinking… {plural(self.tokens, 'token')}, {(self.last - self.first) / 1e9:.1f} s"

    def ended(self, tokens: TokenStream) -> None:
        if self.phase == THINKING:
            tokens.end_thinking(self.note() + ", never closed")
        self.phase = ANSWER


class RunLatency:
    """The heat of a step's tokens for the token pane's latency colouring: its time a token over
    the median of the run's decode steps so far (the last 256), taken again every 8 steps so that a
    fast server's thousands of chunks a second cost little; -1 before the first median."""

    def __init__(self):
        self.per_token: deque[float] = deque(maxlen=256)
        self.steps = 0
        self.median = 0.0

    def heat(self, ev: Step) -> int:
        each = ev.dt_ns / max(ev.n_tokens, 1)
        level = heat(each / self.median) if self.median > 0 else -1
        if ev.kind != "prefill":
            self.per_token.append(each)
            self.steps += 1
            if self.steps % 8 == 1:
                self.median = median(self.per_token)
        return level


class MonitorScreen(Screen):
    def __init__(self, session, kind: str, above: Iterable[Widget] = (), present: bool = False):
        """`kind`: the source's ("engine", "server", "fleet"): on a server the KV pane is its own
        figures (its cache is not ours to measure), a fleet adds a row per replica; `above`:
        widgets over the status line (the demo's caption); `present`: start on the presenter's screen."""
        super().__init__()
        self.session = session
        self.kind = kind
        self.above = list(above)
        self._text: list[tuple[str, str, int, int, str]] = []  # this frame's tokens (text, origin, heat, sureness, phase), added once per frame
        self._phases = Phases()
        self._drafts: tuple[int, int, str] | None = None  # this frame's accepted and rejected drafts, and the last step's rejected text
        self._latency = RunLatency()
        self._table_t = 0.0
        self.status = StatusBar(id="status")
        self.tokens = TokenStream(id="tokens")
        self.charts = [
            LatencyChart(session, id="latency"),
            ServerPane(session, id="kv") if kind in ("server", "fleet") else KVChart(session, id="kv"),
            MemoryChart(session, id="memory"),
            UtilChart(session, id="util"),
        ]
        self.panes = {w.id: w for w in (self.tokens, RunsTable(session, id="runs"), *self.charts)}
        if kind == "fleet":  # a fleet through Prometheus: a row per replica, full width
            self.panes["fleet"] = FleetPane(session, id="fleet")
        self.key_bar = KeyBar(id="keys")
        self.numbers = BigNumbers(id="numbers")
        self.present = False  # the presenter's screen (P): big figures, thick charts, one at a time, no table
        self._present(present)
        self.mode = ""  # wide, narrow or tiny, once laid out
        self.view = 0  # the chart shown where only one fits

    def compose(self) -> ComposeResult:
        yield from self.above
        yield self.status
        yield self.numbers
        with Horizontal(id="main"):
            yield self.tokens
            with Container(id="charts"):
                yield from self.charts
        if "fleet" in self.panes:
            yield self.panes["fleet"]
        yield self.panes["runs"]  # full width: its columns are the comparison the levers exist for
        yield Static(f"terminal too small for the charts: enlarge it ({TINY_W}×{TINY_H} or more)", id="tiny-note")
        yield self.key_bar

    # ------------------------------------------------------------ events on the panes
    def show(self, ev) -> None:
        """What an event changes on the panes: the text (lever switches and errors marked inline),
        which panes redraw at the end of the frame, and what it says in a notification."""
        if isinstance(ev, Step):
            level = self._latency.heat(ev)
            shown = not (self.session.levers.server and ev.segment)  # a server run's first stream is the one shown
            if shown:
                self._phases.step(ev, self)
            if ev.text and shown:
                phase = ev.phase
                accepted, rejected, _ = self._drafts or (0, 0, "")
                self._drafts = (accepted + ev.accepted, rejected + ev.proposed - ev.accepted, ev.rejected_text)
                if ev.token_chars:  # each token's text with its own probability
                    ends = list(accumulate(ev.token_chars))
                    for i, (p, start, end) in enumerate(zip(ev.confidence, [0, *ends], ends, strict=False)):
                        self._text.append((ev.text[start:end], "drafted" if i < ev.accepted else "", level, sureness(p), phase))
                else:
                    if ev.drafted_chars:
                        self._text.append((ev.text[: ev.drafted_chars], "drafted", level, -1, phase))
                    self._text.append((ev.text[ev.drafted_chars :], "", level, -1, phase))
            self.mark("latency", "kv")
            return
        self.flush_text()  # what follows in the pane comes after the text so far
        if isinstance(ev, Sampled):
            self.mark("memory", "util")
        elif isinstance(ev, RunStarted):
            self._latency = RunLatency()
            self._phases = Phases(ev.t_ns)
            self.tokens.add_prompt(ev.run_id, ev.prompt_text, ev.levers.label())
            self.mark("runs", "latency", "kv")
        elif isinstance(ev, RunFinished):
            self._phases.ended(self.tokens)
            self.mark("runs", "memory")
        elif isinstance(ev, LeverChanged):
            if ev.run_id is not None:
                self.tokens.add_mark(f"{ev.lever}→{short_value(ev.value)}")
            self.mark("runs", "latency")
        elif isinstance(ev, ServerSample):
            self.mark("kv")  # --watch: no steps mark it
        elif isinstance(ev, FleetReady | FleetSample) and "fleet" in self.panes:
            self.mark("fleet")
        elif isinstance(ev, EngineReady) and ev.server and len(self.session.servers) == 2:
            self.key_bar.draw()  # t now moves between them
        elif isinstance(ev, EngineError):
            self.tokens.add_mark(ev.message.splitlines()[0], error=True)
            self.notify(ev.message.splitlines()[0], title="engine", severity="error", timeout=8)
        elif isinstance(ev, LeverRefused):
            self.notify(ev.reason, title=f"{ev.lever} refused", severity="warning")
        if isinstance(ev, FleetReady) and ev.watch:
            self.tokens.add_mark("watching: tokentop sends no request of its own (--watch); the fleet pane is the replicas' own traffic")
        elif isinstance(ev, FleetSample):
            for line in [*ev.notes, *([ev.error] if ev.error else [])]:
                self.notify(line, title="fleet", severity="warning" if ev.error else "information", timeout=8)

    def flush_text(self) -> None:
        """The frame's tokens into the text pane at once: a fast server sends thousands a second."""
        for marks, parts in groupby(self._text, key=lambda part: part[1:]):
            self.tokens.add_text("".join(text for text, *_ in parts), *marks)
        if self._drafts is not None:  # after the frame's text: the ghost is its last verify step's
            self.tokens.count_drafts(*self._drafts)
            self._drafts = None
        self._text.clear()

    def mark(self, *names: str) -> None:
        for name in names:
            self.panes[name].dirty = True

    def redraw(self, running: bool, force: bool = False) -> None:
        """The frame's end: the text so far, then each pane marked since the last frame (the runs
        table once a second while a run's numbers change); `force`: past each pane's rate limit, so
        that a server's first figures are not held back behind the "waiting" its pane drew first."""
        self.flush_text()
        now = time.monotonic()
        if running and now - self._table_t > 1.0:
            self._table_t = now
            self.mark("runs")
        for widget in self.panes.values():
            widget.redraw(force)
        if self.present:
            self.numbers.show(self.session)

    def key_applies(self, action: str) -> bool:
        """Whether a key does something here (the key bar leaves out those that do not)."""
        if action == "next_view":
            return self.mode != "wide"
        if action == "next_server":
            return len(self.session.servers) > 1
        if action == "xray":
            return self.kind == "server"
        ready = self.session.ready
        if action == "history":  # CUDA's allocator only; elsewhere the key says why not
            return ready is not None and not ready.server and ready.device.startswith("cuda")
        if action == "anatomy":
            return ready is not None and not ready.server
        if action == "lever('think')":  # a reasoning model's only
            return ready is not None and ready.thinks
        return True

    # ------------------------------------------------------------ layout
    def fit(self, width: int, height: int) -> None:
        """The layout for this size; cheap when its class (wide, narrow, tiny) is unchanged."""
        mode = "tiny" if (width < TINY_W or height < TINY_H) else "narrow" if (width < NARROW_W or height < NARROW_H or self.present) else "wide"
        if mode == self.mode:
            return
        self.mode = mode
        self.set_class(mode == "tiny", "-tiny")
        self.set_class(mode != "wide", "-narrow")
        self.show_view()
        if self.key_bar.is_mounted:
            self.key_bar.draw()  # v shows where it does something

    def set_present(self, on: bool) -> None:
        """The presenter's screen on or off: the figures in Digits over the text and one chart (v
        cycles them), drawn two dots thick; the runs table and the other charts make room."""
        self._present(on)
        self.mode = ""  # laid out again at this size
        self.fit(*self.app.size)
        if on:
            self.numbers.show(self.session)

    def _present(self, on: bool) -> None:
        self.present = on
        self.set_class(on, "-present")
        for chart in self.charts:
            chart.thick = on

    def action_present(self) -> None:
        self.set_present(not self.present)
        self.notify(f"presenter's screen {'on: v cycles the charts' if self.present else 'off'}")

    def show_view(self) -> None:
        single = self.mode != "wide"
        for i, name in enumerate(CHARTS):
            chart = self.panes[name]
            chart.display = (not single) or i == self.view
            chart.dirty = True

    def leak_view(self) -> None:
        """The memory pane between memory over time and the leak view; shown if one chart shows at a time."""
        chart = self.panes["memory"]
        chart.leak_view = not chart.leak_view
        if self.mode != "wide":
            self.view = CHARTS.index("memory")
            self.show_view()
        chart.dirty = True

    def next_view(self) -> str | None:
        """The next chart where one shows at a time; otherwise why `v` does nothing here."""
        if self.mode == "wide":
            return f"all four charts already show; v cycles them on a terminal smaller than {NARROW_W}×{NARROW_H}"
        if self.mode == "tiny":
            return f"the terminal is too small for charts: enlarge it to {TINY_W}×{TINY_H} or more"
        self.view = (self.view + 1) % len(CHARTS)
        self.show_view()
        return None
