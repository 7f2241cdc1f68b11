"""One line: lever states, the current run's TTFT, ITL p50 and tok/s, and what the engine is doing.

Two line panes side by side, each repainting only the cells that changed (pane.py): a Static
repaints its whole line on every update, so each frame re-sent the levers and the state before the
figures. The run's figures, which move with every frame while generating, sit on the right in a
pane of their own, so they keep their place when the state before them grows or shrinks."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.strip import Strip

from tui_app.core import fmt
from tui_app.ui.status_text import status_items
from tui_app.ui.widgets.pane import LinePane

SHRINK_AT = 12  # the figures' pane narrows only when they have shrunk by this many cells: a move sends the line


class _Part(LinePane):
    DEFAULT_CSS = """
    _Part {
        height: 1;
        width: 1fr;
    }
    """

    text = Text()

    def put(self, text: Text) -> None:
        if text != self.text:
            self.text = text
            self.dirty = True
        self.redraw()

    def draw(self, width: int, height: int) -> list[Strip]:
        return [Strip(self.text.render(self.app.console), self.text.cell_len).crop(0, width)]


class StatusBar(Horizontal):
    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.left, self.right = _Part(), _Part()
        self.right.styles.width = 0

    def compose(self) -> ComposeResult:
        yield self.left
        yield self.right

    def show(self, session, state: str, preset: str, auto: bool, wanted: dict | None = None, link: str | None = None) -> None:
        """The line status_text.status_items says; where it is too long, whole items leave by
        priority (fmt.fit), the state shortening by whole words, never a cut word."""
        items = status_items(session, state, preset, auto, wanted, link)
        width = self.content_size.width or 10_000  # before the first layout: everything
        shown = fmt.fit([(item.variants, item.priority) for item in items], width, sep=" ")
        left, right = Text(), Text()
        for item, text in zip(items, shown, strict=True):
            t = right if item.figure else left
            if text is None:
                continue
            if t or t is right:
                t.append(" ")
            if item.key is not None:
                t.append(f"{item.key}:", style="dim")
                t.append(text[len(item.key) + 1 :], style=item.style)
            else:
                t.append(text, style=item.style)
        self._place(right.cell_len, width - left.cell_len)
        self.left.put(left)
        self.right.put(right)

    def _place(self, need: int, room: int) -> None:
        """The figures' pane: as wide as they are, widened at once, narrowed only after a clear
        shrink or when the rest needs the room (each move is a layout of the line)."""
        now = int(self.right.styles.width.value) if self.right.styles.width is not None else 0
        if need > now or need < now - SHRINK_AT or now > room:
            self.right.styles.width = need

    def render(self) -> Text:
        """The whole line as text (for tests and export)."""
        return Text.assemble(self.left.text, self.right.text)
