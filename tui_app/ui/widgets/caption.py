"""The demo's caption banner: the step and what to watch, the effect the last step measured, and at
the tour's end the summary table. Drawn through the line API like the other panes."""

from __future__ import annotations

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

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.lines: list[tuple[str, Style]] = []

    def show(self, title: str, watch: str, effect: str, note: str = "") -> None:
        self.lines = [(title, TITLE), (watch, WATCH), (effect, EFFECT), (note, NOTE)]
        self.styles.height = 4
        self.dirty = True

    def show_table(self, title: str, table: list[str], note: str) -> None:
        self.lines = [(title, TITLE), *((row, Style()) for row in table), (note, NOTE)]
        self.styles.height = len(self.lines)
        self.dirty = True

    def text(self) -> str:
        return "\n".join(text for text, _ in self.lines)

    def draw(self, width: int, height: int) -> list[Strip]:
        return [Strip([Segment(text, style)]).crop(0, width) for text, style in self.lines[:height]]
