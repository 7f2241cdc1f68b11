"""One row per run and per lever segment: the side-by-side comparison the levers exist for.

A table of our own on the line API rather than Textual's DataTable: DataTable cost ~8 ms per
refresh here (a tenth of the UI's budget at one refresh a second) and, sized by its header,
cut numbers short ("56." for 56.0 ms) or hid them behind a horizontal scrollbar that nothing can
focus. This one sizes columns to their contents and, when the pane is too narrow, leaves out the
least important columns whole (the priorities below), so every number shown is complete.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.strip import Strip

from tui_app.core import readings
from tui_app.core.columns import GAP, columns_for, fit_columns
from tui_app.core.session import Row
from tui_app.ui.widgets.pane import LinePane


def _cell(text: str, width: int, left: bool) -> str:
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text.ljust(width) if left else text.rjust(width)


class RunsTable(LinePane):
    DEFAULT_CSS = """
    RunsTable {
        height: 10;
        border: round $primary;
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
        columns = columns_for(self._rows)
        cells = [tuple(c.cell(r) for c in columns) for r in self._rows]
        shown, widths = fit_columns(cells, width, columns)
        gap = " " * GAP

        def line(values, style) -> Strip:
            text = gap.join(_cell(values[i], w, columns[i].left) for i, w in zip(shown, widths, strict=True))
            return Strip([Segment(text, style)]).crop(0, width)

        # Compared servers: each against the first, on the table's last lines.
        summary = readings.comparison(self.session)[: max(height - 2, 0)]
        visible = max(height - 1 - len(summary), 0)
        self.scrolled = min(self.scrolled, max(len(cells) - visible, 0))
        end = len(cells) - self.scrolled
        body = range(max(end - visible, 0), end)
        self.border_title = f"runs · {self.scrolled} newer below (wheel down)" if self.scrolled else "runs"
        rows = [line([c.title for c in columns], self.HEADER)] + [
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
