"""The demo's caption banner: the step and what to watch, the effect the last step measured, and at
the tour's end the summary table. Drawn through the line API like the other panes."""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from tui_app.ui.widgets.pane import LinePane

TITLE = Style(bold=True)
WATCH = Style(italic=True)
EFFECT = Style(bold=True, color="green")
NOTE = Style(color="yellow")


class CaptionBanner(LinePane):
    DEFAULT_CSS = """
    CaptionBanner {
        height: 4;
        background: $boost;
        padding: 0 1;
    }
    """

    MAX_ROWS = 8  # a caption wrapped on a narrow terminal (80×24 on a projector) takes this much at most

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.lines: list[tuple[str, Style]] = []
        self.wrap = False  # a caption's lines wrap by words; a table's rows keep their columns

    def show(self, title: str, watch: str, effect: str, note: str = "") -> None:
        self.lines = [(title, TITLE), (watch, WATCH), (effect, EFFECT), (note, NOTE)]
        self.wrap = True
        self.styles.height = 4
        self.dirty = True

    def show_table(self, title: str, table: list[str], note: str) -> None:
        self.lines = [(title, TITLE), *((row, Style()) for row in table), (note, NOTE)]
        self.wrap = False
        self.styles.height = len(self.lines)
        self.dirty = True

    def text(self) -> str:
        return "\n".join(text for text, _ in self.lines)

    def draw(self, width: int, height: int) -> list[Strip]:
        """The lines; a caption's wrapped to the width, the banner growing to hold them (up to MAX_ROWS)."""
        rows = [(piece, style) for text, style in self.lines for piece in (textwrap.wrap(text, width) if self.wrap else [text]) or [""]]
        if self.wrap and len(rows) != height:
            self.styles.height = max(min(len(rows), self.MAX_ROWS), len(self.lines))  # drawn again at the new height
        return [Strip([Segment(text, style)]).crop(0, width) for text, style in rows[:height]]
