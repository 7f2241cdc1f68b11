"""One row per run and per lever segment: the side-by-side comparison the levers exist for.

A table of our own on the line API rather than Textual's DataTable: DataTable cost ~8 ms per
refresh here (a tenth of the UI's budget at one refresh a second) and, sized by its header,
cut numbers short ("56." for 56.0 ms) or hid them behind a horizontal scrollbar that nothing can
focus. This one sizes columns to their contents and, when the pane is too narrow, leaves out the
least important columns whole (the priorities below), so every number shown is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.strip import Strip

from tui_app.core import fmt
from tui_app.core.session import Row
from tui_app.ui.widgets.pane import LinePane


@dataclass(frozen=True)
class Column:
    title: str
    cell: Callable[[Row], str]
    priority: int  # 0 is always shown; higher numbers are left out first when space is short
    left: bool = False  # text is left-aligned, numbers right-aligned
    cap: int = 30  # widest a cell may make its column; longer text ends in "…"


COLUMNS = (
    Column("run", lambda r: r.label, 0, left=True),
    Column("levers", lambda r: r.levers_label, 0, left=True, cap=40),
    Column("prompt", lambda r: str(r.stats.prompt_tokens), 6),
    Column("new", lambda r: str(r.stats.n_tokens), 5),
    Column("TTFT ms", lambda r: fmt.ms(r.stats.ttft_s, 0, unit=False), 1),
    Column("ITL p50", lambda r: fmt.ms(r.stats.itl.p50, unit=False), 1),
    Column("p95", lambda r: fmt.ms(r.stats.itl.p95, unit=False), 3),
    Column("p99", lambda r: fmt.ms(r.stats.itl.p99, unit=False), 5),
    Column("tok/s", lambda r: fmt.num(r.stats.decode_tps), 0),
    Column("accept", lambda r: fmt.pct(r.stats.accept_rate), 3),
    # A server's KV cache is its own (the server pane shows its gauge); none is measured per run.
    Column("KV MiB", lambda r: "–" if r.stats.levers.server else fmt.mib(r.stats.kv_bytes), 4),
    Column("RSS MiB", lambda r: fmt.mib(r.finished.peak_rss) if r.finished else "", 4),
    Column("ppl", lambda r: fmt.num(r.finished.perplexity, 2) if r.finished else "", 5),
    Column("vs plain greedy", lambda r: r.note, 2, left=True),
)
GAP = 2


def fit_columns(rows: list[tuple[str, ...]], width: int) -> tuple[list[int], list[int]]:
    """The columns to show (indexes) and their widths: every column sized to its widest cell
    (capped); the least important left out until the rest fit in `width`."""
    widths = [min(max([len(c.title)] + [len(r[i]) for r in rows]), max(c.cap, len(c.title))) for i, c in enumerate(COLUMNS)]
    shown = list(range(len(COLUMNS)))

    def total() -> int:
        return sum(widths[i] for i in shown) + GAP * (len(shown) - 1)

    while total() > width:
        droppable = [i for i in shown if COLUMNS[i].priority > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (COLUMNS[i].priority, i)))
    return shown, [widths[i] for i in shown]


def _cell(text: str, width: int, left: bool) -> str:
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text.ljust(width) if left else text.rjust(width)


class RunsTable(LinePane):
    DEFAULT_CSS = """
    RunsTable {
        height: 10;
        border: round $primary-darken-2;
        border-title-color: $text;
        padding: 0 1;
    }
    """
    HEADER = Style(bold=True, underline=True)
    RUN = Style(bold=True)
    SEGMENT = Style(dim=True)
    SUMMARY = Style(bold=True, italic=True)

    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.session = session
        self.border_title = "runs"
        self.scrolled = 0  # rows scrolled back from the newest (mouse wheel)
        self._rows: list[Row] = []

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def draw(self, width: int, height: int) -> list[Strip]:
        self._rows = self.session.rows()
        cells = [tuple(c.cell(r) for c in COLUMNS) for r in self._rows]
        shown, widths = fit_columns(cells, width)
        gap = " " * GAP

        def line(values, style) -> Strip:
            text = gap.join(_cell(values[i], w, COLUMNS[i].left) for i, w in zip(shown, widths, strict=True))
            return Strip([Segment(text, style)]).crop(0, width)

        # Compared servers: each against the first, on the table's last lines.
        summary = self.session.comparison()[: max(height - 2, 0)]
        visible = max(height - 1 - len(summary), 0)
        self.scrolled = min(self.scrolled, max(len(cells) - visible, 0))
        end = len(cells) - self.scrolled
        body = range(max(end - visible, 0), end)
        self.border_title = f"runs · {self.scrolled} newer below (wheel down)" if self.scrolled else "runs"
        rows = [line([c.title for c in COLUMNS], self.HEADER)] + [
            line(cells[k], self.SEGMENT if self._rows[k].segment is not None else self.RUN if k == len(cells) - 1 else None) for k in body
        ]
        rows += [Strip.blank(width)] * (height - len(rows) - len(summary))
        return rows + [Strip([Segment(text, self.SUMMARY)]).crop(0, width) for text in summary]

    def _scroll(self, by: int) -> None:
        self.scrolled = max(self.scrolled + by, 0)
        self.dirty = True
        self.redraw(force=True)  # the wheel's answer, title included, now

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll(1)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll(-1)
