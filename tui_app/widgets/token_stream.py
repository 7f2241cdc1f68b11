"""The text as it is generated: the prompt dimmed, lever switches marked inline.

Holds a bounded deque of styled chunks and renders only the lines that fit, so the cost of a
redraw does not grow with the session.
"""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.widget import Widget

MAX_CHUNKS = 4000
TAIL_CHARS = 6000


class TokenStream(Widget):
    DEFAULT_CSS = """
    TokenStream {
        border: round $primary-darken-2;
        border-title-color: $text;
        height: 1fr;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.chunks: deque[tuple[str, str]] = deque(maxlen=MAX_CHUNKS)
        self.dirty = True
        self.border_title = "tokens"

    def add_prompt(self, run_id: int, text: str, levers: str) -> None:
        if self.chunks:
            self.chunks.append(("\n\n", ""))
        self.chunks.append((f" run {run_id} · {levers} ", "reverse"))
        self.chunks.append(("\n" + text.strip() + "\n", "dim"))
        self.dirty = True

    def add_text(self, text: str) -> None:
        if text:
            self.chunks.append((text, ""))
            self.dirty = True

    def add_mark(self, label: str, error: bool = False) -> None:
        self.chunks.append((f"⟨{label}⟩", "bold red" if error else "bold black on yellow"))
        self.dirty = True

    def redraw(self) -> None:
        if self.dirty and self.display:
            self.dirty = False
            self.refresh()

    def render(self) -> Text:
        # Only the tail can be seen; building Text from it keeps the cost per frame flat.
        picked, total = [], 0
        for text, style in reversed(self.chunks):
            picked.append((text, style))
            total += len(text)
            if total > TAIL_CHARS:
                break
        out = Text()
        for text, style in reversed(picked):
            out.append(text, style=style or None)
        width = max(self.content_size.width, 10)
        lines = out.wrap(self.app.console, width)
        height = max(self.content_size.height, 1)
        tail = Text("\n").join(lines[-height:])
        return tail
