"""Chart axes that hold still between frames.

A chart whose newest point is always at the right edge moves every point one column left with
each new one, and a y-axis fitted to the data's maximum moves every point up or down whenever the
maximum changes: either way the whole chart differs from the frame before, and all of it is sent
to the terminal again. Here the x-axis is a page (points keep their column; when the newest
reaches the right edge the view jumps half a width) and the y-axis a round number kept until the
data leaves it or shrinks well below it. A frame then changes the columns of its new points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STEPS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
HEADROOM = 1.05  # above the largest value, so a line at the maximum stays off the top edge
SHRINK = 0.4  # the scale is refitted when the data's maximum falls below this share of it


def round_up(value: float) -> float:
    """The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k at or above `value` (> 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    for step in STEPS:
        if step * scale >= value * (1 - 1e-9):
            return step * scale
    return 10.0 * scale


@dataclass
class Scale:
    """An axis's upper bound kept between frames: refitted (a round number above the data's
    maximum) when the data goes above it or falls below SHRINK of it."""

    floor: float = 0.0  # the smallest upper bound (utilization: 100 %)
    hi: float | None = None

    def fit(self, data_max: float) -> float:
        want = max(data_max * HEADROOM, self.floor)
        if self.hi is None or want > self.hi or want < self.hi * SHRINK:
            self.hi = max(round_up(want), self.floor) if want > 0 else max(self.floor, 1.0)
        return self.hi


@dataclass
class Pager:
    """The first index of a chart `width` points wide: points keep their column; when the newest
    passes the right edge the view jumps so that it sits in the middle. A first view (or one
    whose points have left the history) shows as many of the newest as fit."""

    start: int | None = None

    def first(self, oldest: int, newest: int, width: int) -> int:
        """oldest, newest: the indexes of the oldest point kept and of the newest."""
        width = max(width, 2)
        start = self.start
        if start is None or start < oldest or start > newest:  # a first view: as many points as fit
            start = max(oldest, newest - width + 1)
        elif newest - start >= width:
            start = max(oldest, newest - width // 2)
        self.start = start
        return start
