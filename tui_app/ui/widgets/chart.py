"""Base of every chart pane: a braille canvas drawn from the session's ring buffers."""

from __future__ import annotations

from functools import cache
from itertools import groupby, islice
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from tui_app.core import fmt
from tui_app.core.axes import Pager, Scale
from tui_app.core.braille import BLANK, Canvas
from tui_app.ui.widgets.pane import LinePane

BLANK_CELL = chr(BLANK)


class Chart(LinePane):
    DEFAULT_CSS = """
    Chart {
        border: round $primary;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        padding: 0 0;
        height: 1fr;
    }
    """
    AXIS = 9  # columns for the y-axis labels
    # The charts of sampler data (memory, utilization): samples arrive at --hz (4) and are all
    # drawn, two at a time; these two panes are a third of the UI's drawing cost (ui_cost.py).
    SAMPLED_HZ = 2.0
    # A series' colour on a dark and on a light background (look.py): the same hues, each reading
    # at 3:1 or more on its background as a line must.
    COLORS: ClassVar[dict[bool, tuple[str, ...]]] = {
        True: ("#5fd7ff", "#ffaf00", "#87d75f", "#ff5f87", "#af87ff", "#d7d7d7"),
        False: ("#0070a8", "#a65f00", "#2e7d32", "#c2185b", "#6a3fb5", "#5c5c5c"),
    }

    SCALE_FLOOR = 0.0  # the y-axis's smallest upper bound

    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.session = session
        self.thick = False  # the presenter's screen: lines two dots thick
        self.pager = Pager()  # the x-axis: the first point shown (core/axes.py)
        self.scale = Scale(floor=self.SCALE_FLOOR)  # the y-axis's upper bound

    def sample_page(self, width: int) -> list:
        """The sampler's samples on this page of a chart `width` points wide, oldest first."""
        s = self.session
        if not s.samples:
            return []
        oldest = s.sample_count - len(s.samples)
        first = self.pager.first(oldest, s.sample_count - 1, width)
        return list(islice(s.samples, first - oldest, None))

    def draw(self, width: int, height: int) -> list[Strip]:
        if width <= self.AXIS + 2 or height < 2:
            return []
        drawn = self.draw_chart(width - self.AXIS, height)
        if isinstance(drawn, Text):  # a message instead of a chart
            console = self.app.console
            drawn = [Strip(line) for line in console.render_lines(drawn, console.options.update_width(width), pad=False)]
        return drawn

    def draw_chart(self, width: int, height: int) -> list[Strip] | Text:
        """The chart on a canvas `width` cells wide (the y-axis labels take the rest), or a message."""
        raise NotImplementedError

    def canvas(self, width: int, height: int) -> Canvas:
        return Canvas(width, height, thick=self.thick)

    def _series_style(self, series: int) -> Style:
        colours = self.COLORS[self.app.current_theme.dark]
        return _colour(colours[series % len(colours)])

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
            segs += [Segment(text, self._series_style(owner) if owner >= 0 else None) for text, owner in runs(row)]
            strips.append(Strip(segs))
        # Whole legend entries only, the first ones kept: a cropped line would end "■ pr".
        kept = fmt.fit([((f"■ {name}",), k) for k, (name, _) in enumerate(legend)], self.content_size.width)
        legend_segs = []
        for (name, idx), shown in zip(legend, kept, strict=True):
            if shown is not None:
                legend_segs.append(Segment("■ ", self._series_style(idx)))
                legend_segs.append(Segment(name + "  ", dim))
        strips.append(Strip(legend_segs).crop(0, self.content_size.width))
        return strips

    def set_titles(self, title: list[tuple[tuple[str, ...], int]], subtitle: list[tuple[tuple[str, ...], int]] = ()) -> None:
        """Border title and subtitle fitted to the pane by whole items (fmt.fit): Textual would cut
        them mid-word with "…" (titles lost p95, the KV formula and the GPU reason)."""
        room = max(self.size.width - 6, 0)  # the corners, the rule before the title and a space each side
        self.border_title = "  ".join(t for t in fmt.fit(list(title), room) if t is not None)
        self.border_subtitle = "  ".join(t for t in fmt.fit(list(subtitle), room) if t is not None)


@cache
def _colour(colour: str) -> Style:
    return Style(color=colour)


def runs(row: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """A canvas row as runs of text of one series each. A blank cell is a space (one byte; a blank
    braille cell is three) in the run before it: a space shows no colour, so the run goes on and
    the terminal is not sent a colour change for it, and again for the dots after it."""
    out: list[tuple[str, int]] = []
    for owner, cells in groupby(row, key=lambda cell: -1 if cell[0] == BLANK_CELL else cell[1]):
        text = "".join(" " if ch == BLANK_CELL else ch for ch, _ in cells)
        if owner == -1 and out:
            out[-1] = (out[-1][0] + text, out[-1][1])
        elif out and owner == out[-1][1]:
            out[-1] = (out[-1][0] + text, owner)
        else:
            out.append((text, owner))
    return out


def gpu_unread(name: str, reason: str) -> str:
    """A GPU NVML could not read, and why (a lost GPU's reason names it already)."""
    return reason if reason.startswith("n/a: GPU") else f"{name} {reason or 'n/a'}"
