"""What the benchmarks share: the checkout they run from, how a median is shown with its range,
the real app driven in tmux (tmux.py) and the UI's memory read in parts (heap.py)."""

from __future__ import annotations

import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_range(values: list[float]) -> str:
    """The median of rounds' figures with their range: how the benchmarks show a ratio measured in pairs."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
