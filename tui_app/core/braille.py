"""A lean braille chart renderer: each terminal cell holds 2×4 dots.

Chosen over plotext by measurement: plotext takes 60-80 ms of CPU per redraw of a
105×40 chart here, which on a 2-core machine steals time from the generation being measured;
this renderer draws the same chart in a few ms. It returns plain cells (character + series
index) so that it knows nothing of Rich or Textual and is reused by the headless leak plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Dot bit for (x in 0..1, y in 0..3) within a cell, y from the top (Unicode braille layout).
_DOT = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
BLANK = 0x2800


@dataclass
class Canvas:
    width: int  # cells
    height: int  # cells
    thick: bool = False  # each dot two high: lines that read from the back of a room

    def __post_init__(self) -> None:
        self.bits = [[0] * self.width for _ in range(self.height)]
        self.owner = [[-1] * self.width for _ in range(self.height)]
        self.text: dict[tuple[int, int], tuple[str, int]] = {}

    @property
    def px_w(self) -> int:
        return self.width * 2

    @property
    def px_h(self) -> int:
        return self.height * 4

    def dot(self, x: int, y: int, series: int) -> None:
        """Set pixel (x, y), y = 0 at the top (thick: and the one below it)."""
        for py in (y, y + 1) if self.thick else (y,):
            if 0 <= x < self.px_w and 0 <= py < self.px_h:
                cx, cy = x >> 1, py >> 2
                self.bits[cy][cx] |= _DOT[py & 3][x & 1]
                self.owner[cy][cx] = series

    def vline(self, x: int, series: int) -> None:
        for y in range(self.px_h):
            if y % 2 == 0:  # dotted, so it reads as a marker and not as data
                self.dot(x, y, series)

    def hline(self, y: int, series: int) -> None:
        for x in range(0, self.px_w, 2):
            self.dot(x, y, series)

    def label(self, col: int, row: int, text: str, series: int) -> None:
        """Text over the canvas; skipped where it would overwrite another label."""
        if any((row, col + i) in self.text for i in range(-1, len(text) + 1)):
            return
        for i, ch in enumerate(text):
            if 0 <= col + i < self.width and 0 <= row < self.height:
                self.text[(row, col + i)] = (ch, series)

    def rows(self) -> list[list[tuple[str, int]]]:
        out = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                if (r, c) in self.text:
                    row.append(self.text[(r, c)])
                else:
                    row.append((chr(BLANK + self.bits[r][c]), self.owner[r][c]))
            out.append(row)
        return out

    def lines(self) -> list[str]:
        return ["".join(ch for ch, _ in row) for row in self.rows()]


def bounds(series: list[list[float]], floor_zero: bool = True) -> tuple[float, float]:
    vals = [v for s in series for v in s if v is not None and not math.isnan(v)]
    if not vals:
        return 0.0, 1.0
    lo, hi = min(vals), max(vals)
    if floor_zero:
        lo = min(0.0, lo)
    if hi - lo < 1e-12:
        hi = lo + (abs(lo) or 1.0)
    return lo, hi + (hi - lo) * 0.05


def plot(
    canvas: Canvas, series: list[list[float]], lo: float, hi: float, xs: list[list[float]] | None = None, x_lo: float = 0.0, x_hi: float | None = None
) -> None:
    """Draw line series. Without xs, point i of each series sits at x = i (right-aligned windows are the caller's job)."""
    if x_hi is None:
        x_hi = max((len(s) - 1 for s in series), default=1) or 1
    span_x = (x_hi - x_lo) or 1.0
    span_y = (hi - lo) or 1.0
    for idx, ys in enumerate(series):
        prev = None
        for i, y in enumerate(ys):
            if y is None or math.isnan(y):
                prev = None
                continue
            xv = xs[idx][i] if xs else i
            px = round((xv - x_lo) / span_x * (canvas.px_w - 1))
            py = round((1 - (y - lo) / span_y) * (canvas.px_h - 1))
            py = min(max(py, 0), canvas.px_h - 1)
            if prev is not None and abs(px - prev[0]) <= canvas.px_w:
                _segment(canvas, prev[0], prev[1], px, py, idx)
            else:
                canvas.dot(px, py, idx)
            prev = (px, py)


def _segment(canvas: Canvas, x0: int, y0: int, x1: int, y1: int, series: int) -> None:
    steps = max(abs(x1 - x0), abs(y1 - y0), 1)
    for k in range(steps + 1):
        canvas.dot(round(x0 + (x1 - x0) * k / steps), round(y0 + (y1 - y0) * k / steps), series)


def y_to_px(canvas: Canvas, y: float, lo: float, hi: float) -> int:
    return min(max(round((1 - (y - lo) / ((hi - lo) or 1.0)) * (canvas.px_h - 1)), 0), canvas.px_h - 1)


def text_plot(values: list[float], width: int = 60, height: int = 8, title: str = "") -> str:
    """A plain-text braille plot with a y-axis, for headless output."""
    lo, hi = bounds([values], floor_zero=False)
    c = Canvas(width, height)
    plot(c, [values], lo, hi)
    lines = c.lines()
    out = [title] if title else []
    for i, line in enumerate(lines):
        label = f"{hi:9.1f} ┤" if i == 0 else (f"{lo:9.1f} ┤" if i == len(lines) - 1 else " " * 9 + " │")
        out.append(label + line)
    return "\n".join(out)
