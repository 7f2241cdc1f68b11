"""Base of every chart pane: a braille canvas drawn from the session's ring buffers.

Redrawn only when the app marks it dirty, at the app's bounded frame rate, and never while hidden.
"""

from __future__ import annotations

import time

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from tui_app.charts import Canvas


class Chart(Widget):
    DEFAULT_CSS = """
    Chart {
        border: round $primary-darken-2;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        padding: 0 0;
        height: 1fr;
    }
    """
    AXIS = 9  # columns for the y-axis labels
    MAX_HZ: float | None = None  # redraws per second at most; None: every frame that has new data
    COLORS: tuple[str, ...] = ("#5fd7ff", "#ffaf00", "#87d75f", "#ff5f87", "#af87ff", "#d7d7d7")

    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.session = session
        self.dirty = True
        self._strips: list[Strip] = []
        self._styles = [Style(color=c) for c in self.COLORS]
        self._drawn_at = 0.0

    def redraw(self, force: bool = False) -> None:
        """Called each frame by the app; cheap when nothing changed or the pane is hidden."""
        if not self.dirty or not self.display or self.size.width <= self.AXIS + 2 or self.size.height < 2:
            return
        now = time.monotonic()
        if not force and self.MAX_HZ and now - self._drawn_at < 1.0 / self.MAX_HZ:
            return  # still dirty: a later frame draws it
        self.dirty = False
        self._drawn_at = now
        drawn = self.draw(self.size.width - self.AXIS, self.size.height)
        if isinstance(drawn, Text):  # a message instead of a chart
            console = self.app.console
            lines = console.render_lines(drawn, console.options.update_width(self.size.width), pad=False)
            drawn = [Strip(line) for line in lines]
        # Segments without a background would show the terminal's own, not the pane's.
        base = self.rich_style
        self._strips = [strip.apply_style(base) for strip in drawn]
        self.refresh()

    def on_resize(self) -> None:
        self.dirty = True
        self.redraw(force=True)

    def render_line(self, y: int) -> Strip:
        """The line API: strips built once per redraw, so a frame costs no text layout."""
        return self._strips[y] if y < len(self._strips) else Strip.blank(self.size.width, self.rich_style)

    def draw(self, width: int, height: int) -> Text:
        raise NotImplementedError

    def compose_text(self, canvas: Canvas, lo: float, hi: float, unit_fmt, legend: list[tuple[str, int]]) -> list[Strip]:
        """Canvas + y-axis labels + a legend in the last row, as strips of styled segments."""
        dim = Style(dim=True)
        strips = []
        rows = canvas.rows()
        for i, row in enumerate(rows):
            if i == 0:
                label = unit_fmt(hi)
            elif i == len(rows) - 1:
                label = unit_fmt(lo)
            elif i == len(rows) // 2:
                label = unit_fmt((hi + lo) / 2)
            else:
                label = ""
            segs = [Segment(f"{label:>{self.AXIS - 1}.{self.AXIS - 1}}┤" if label else " " * (self.AXIS - 1) + "│", dim)]
            run_owner, run_chars = None, []
            for ch, owner in row:
                if owner != run_owner and run_chars:
                    segs.append(Segment("".join(run_chars), self._styles[run_owner % len(self._styles)] if run_owner >= 0 else None))
                    run_chars = []
                run_owner = owner
                run_chars.append(ch)
            if run_chars:
                segs.append(Segment("".join(run_chars), self._styles[run_owner % len(self._styles)] if run_owner >= 0 else None))
            strips.append(Strip(segs))
        legend_segs = []
        for name, idx in legend:
            legend_segs.append(Segment("■ ", self._styles[idx % len(self._styles)]))
            legend_segs.append(Segment(name + "  ", dim))
        strips.append(Strip(legend_segs).crop(0, self.size.width))
        return strips
