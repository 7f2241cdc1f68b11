"""Base of the panes drawn through Textual's line API: strips built in `redraw()` when the app has
marked the pane dirty, at most once a frame (or MAX_HZ), never while hidden; a frame then costs no
text layout. Textual's own `render()` path lays the content out again on every refresh."""

from __future__ import annotations

import time

from textual.strip import Strip
from textual.widget import Widget


class LinePane(Widget):
    MAX_HZ: float | None = None  # redraws per second at most; None: every frame that has new data

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.dirty = True
        self._strips: list[Strip] = []
        self._drawn_at = 0.0

    def redraw(self, force: bool = False) -> None:
        """Called each frame by the app; cheap when nothing changed or the pane is hidden."""
        width, height = self.content_size
        if not self.dirty or not self.display or width <= 0 or height <= 0:
            return
        now = time.monotonic()
        if not force and self.MAX_HZ and now - self._drawn_at < 1.0 / self.MAX_HZ:
            return  # still dirty: a later frame draws it
        self.dirty = False
        self._drawn_at = now
        # Segments without a background would show the terminal's own, not the pane's.
        base = self.rich_style
        self._strips = [strip.apply_style(base) for strip in self.draw(width, height)]
        self.refresh()

    def draw(self, width: int, height: int) -> list[Strip]:
        """The pane's lines for a content area of this size."""
        raise NotImplementedError

    def on_resize(self) -> None:
        self.dirty = True
        self.redraw(force=True)

    def render_line(self, y: int) -> Strip:
        return self._strips[y] if y < len(self._strips) else Strip.blank(self.content_size.width, self.rich_style)
