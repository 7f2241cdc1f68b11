"""Leak detector: the trend of the memory baseline (memory after each run ends) across runs.

A leak shows as a rising baseline. We fit a least-squares line over the recent baselines
(after a few warm-up runs, whose growth is caches filling, not a leak) and call a leak
"suspected" only when the whole 95 % confidence interval of the slope lies above a floor
of MIN_MB_PER_RUN: a single allocator step or noise does not move the lower bound that far.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from monitors.text import plural

MB = 1024 * 1024
# Two-sided 95 % Student-t quantiles for 1..30 degrees of freedom.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_quantile_975(df: int) -> float:
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.96 + 2.4 / df  # within 0.002 of the exact value for df > 30


@dataclass
class LeakVerdict:
    status: str  # "collecting", "none" or "suspected"
    mb_per_run: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        if self.status == "collecting":
            return f"leak: collecting ({plural(self.n, 'run')})"
        sign = "+" if self.mb_per_run >= 0 else ""
        return f"leak: {self.status} ({sign}{self.mb_per_run:.2f} MB/run, 95% [{self.low:.2f}, {self.high:.2f}], {plural(self.n, 'run')})"


def fit_slope(ys: list[float], xs: list[float] | None = None) -> tuple[float, float]:
    """Least-squares slope of ys against xs (default 0..n-1) and its standard error."""
    n = len(ys)
    xs = list(range(n)) if xs is None else xs
    xm = sum(xs) / n
    ym = sum(ys) / n
    sxx = sum((x - xm) ** 2 for x in xs)
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = ym - slope * xm
    resid = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    se = math.sqrt(resid / (n - 2) / sxx) if n > 2 else math.inf
    return slope, se


def slope_interval(ys: list[float], xs: list[float] | None = None) -> tuple[float, float, float]:
    """The slope and its 95 % interval (t with n − 2 degrees of freedom): (slope, low, high)."""
    slope, se = fit_slope(ys, xs)
    half = t_quantile_975(len(ys) - 2) * se
    return slope, slope - half, slope + half


def fit_fan(ys: list[float], verdict: LeakVerdict) -> list[tuple[float, float]]:
    """The fitted line, then its slope's 95 % interval (low, high), each as its value at the first
    and at the last of the fitted baselines `ys`, all through their centre: the evidence as the
    memory pane's leak view and the report draw it."""
    mid, ym = (len(ys) - 1) / 2, sum(ys) / len(ys)
    return [(ym - slope * mid, ym + slope * mid) for slope in (verdict.mb_per_run, verdict.low, verdict.high)]


class LeakDetector:
    MIN_MB_PER_RUN = 0.25

    def __init__(self, warmup: int = 3, window: int = 50, min_runs: int = 8, min_mb_per_run: float = MIN_MB_PER_RUN):
        self.warmup = warmup
        self.min_runs = min_runs
        self.min_mb_per_run = min_mb_per_run
        self.window = window
        self.seen = 0
        # Every baseline with its place in the whole series (a reset does not restart it) and
        # whether it was a warm-up run, and where the series restarted: the leak view draws them,
        # and the fit is over those since the last restart (`baselines`).
        self.count = 0
        self.history: deque[tuple[int, float, bool]] = deque(maxlen=window + warmup)
        self.resets: deque[int] = deque(maxlen=window + warmup)

    @property
    def baselines(self) -> list[float]:
        """The last `window` baselines since the series last restarted, its warm-up left out: the fitted ones."""
        start = self.resets[-1] if self.resets else 0
        return [mb for n, mb, warm in self.history if n > start and not warm][-self.window :]

    @property
    def runs_needed(self) -> int:
        """Runs before the first verdict: the warmup, then enough baselines for a trend."""
        return self.warmup + self.min_runs

    def reset(self) -> None:
        """Start a new series: after a lever is prepared (a quantized copy, a compiled graph)
        the baseline rises for a legitimate reason, and only runs after it compare."""
        self.seen = 0
        if self.count and (not self.resets or self.resets[-1] != self.count):
            self.resets.append(self.count)  # after this many baselines

    def add(self, baseline_bytes: int) -> LeakVerdict:
        self.seen += 1
        self.count += 1
        self.history.append((self.count, baseline_bytes / MB, self.seen <= self.warmup))
        return self.verdict()

    def verdict(self) -> LeakVerdict:
        ys = self.baselines
        if len(ys) < self.min_runs:
            return LeakVerdict("collecting", math.nan, math.nan, math.nan, self.seen)
        slope, low, high = slope_interval(ys)
        status = "suspected" if low > self.min_mb_per_run else "none"
        return LeakVerdict(status, slope, low, high, self.seen)
