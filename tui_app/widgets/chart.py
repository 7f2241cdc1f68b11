"""Base of every chart pane: a braille canvas drawn from the session's ring buffers.

Redrawn only when the app marks it dirty, at the app's bounded frame rate, and never while hidden.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
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
    COLORS: tuple[str, ...] = ("#5fd7ff", "#ffaf00", "#87d75f", "#ff5f87", "#af87ff", "#d7d7d7")

    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.session = session
        self.dirty = True
        self._rendered: Text = Text("")

    def redraw(self) -> None:
        """Called each frame by the app; cheap when nothing changed or the pane is hidden."""
        if not self.dirty or not self.display or self.size.width <= self.AXIS + 2 or self.size.height < 2:
            return
        self.dirty = False
        self._rendered = self.draw(self.size.width - self.AXIS, self.size.height)
        self.refresh()

    def on_resize(self) -> None:
        self.dirty = True
        self.redraw()

    def render(self) -> Text:
        return self._rendered

    def draw(self, width: int, height: int) -> Text:
        raise NotImplementedError

    def compose_text(self, canvas: Canvas, lo: float, hi: float, unit_fmt, legend: list[tuple[str, int]]) -> Text:
        """Canvas + y-axis labels + a legend in the last row, as Rich Text."""
        out = Text()
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
            out.append(f"{label:>{self.AXIS - 1}.{self.AXIS - 1}}┤" if label else " " * (self.AXIS - 1) + "│", style="dim")
            run_style, run_chars = None, []
            for ch, owner in row:
                style = Style(color=self.COLORS[owner % len(self.COLORS)]) if owner >= 0 else None
                if style != run_style and run_chars:
                    out.append("".join(run_chars), style=run_style)
                    run_chars = []
                run_style = style
                run_chars.append(ch)
            if run_chars:
                out.append("".join(run_chars), style=run_style)
            out.append("\n")
        for name, idx in legend:
            out.append("■ ", style=Style(color=self.COLORS[idx % len(self.COLORS)]))
            out.append(name + "  ", style="dim")
        return out
