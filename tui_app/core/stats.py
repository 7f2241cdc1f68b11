"""How sure a benchmark figure is: percentile-bootstrap intervals over repeated rounds.

A round is the unit that is repeated (one pass of a cell's requests): the requests inside a round
share its queue and are not independent of each other, so the rounds are what is resampled (a
cluster bootstrap), and the figure is recomputed from the resampled rounds' requests pooled, as
the figure itself was. A ratio of two servers resamples their rounds in pairs (round k of each ran
back to back), so what the two shared (the machine's load at that moment) cancels in the ratio.

Pure Python: the base install has no numpy. 2,000 resamples is the usual floor for a 95 %
percentile interval (Efron & Tibshirani); the seed is fixed so a report does not change between
two renderings of the same data.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from monitors.timing import percentile

T = TypeVar("T")
RESAMPLES = 2000
CONFIDENCE = 0.95


def interval(
    groups: Sequence[T], statistic: Callable[[list[T]], float], resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, float] | None:
    """The percentile-bootstrap interval of `statistic` over `groups` resampled with replacement;
    None with fewer than two groups (nothing to resample) or when every resample is undefined."""
    if len(groups) < 2:
        return None
    rng = random.Random(seed)
    n = len(groups)
    values = []
    for _ in range(resamples):
        v = statistic([groups[rng.randrange(n)] for _ in range(n)])
        if v is not None and not math.isnan(v):
            values.append(v)
    if not values:
        return None
    values.sort()
    tail = (1 - confidence) / 2 * 100
    return percentile(values, tail, True), percentile(values, 100 - tail, True)


def paired_ratio(
    a: Sequence[T], b: Sequence[T], statistic: Callable[[list[T]], float], resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, tuple[float, float] | None]:
    """statistic(b) ÷ statistic(a), and its interval from resampling round k of both together."""
    point = _ratio(statistic(list(b)), statistic(list(a)))
    pairs = list(zip(a, b, strict=True))
    ci = interval(pairs, lambda ps: _ratio(statistic([p[1] for p in ps]), statistic([p[0] for p in ps])), resamples, seed=seed)
    return point, ci


def unpaired_ratio(
    a: Sequence[T], b: Sequence[T], statistic: Callable[[list[T]], float], resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, tuple[float, float] | None]:
    """statistic(b) ÷ statistic(a), and its interval from resampling each side on its own (runs
    that did not run in pairs); None with fewer than two on either side."""
    point = _ratio(statistic(list(b)), statistic(list(a)))
    if len(a) < 2 or len(b) < 2:
        return point, None
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        v = _ratio(statistic([b[rng.randrange(len(b))] for _ in b]), statistic([a[rng.randrange(len(a))] for _ in a]))
        if not math.isnan(v):
            values.append(v)
    values.sort()
    tail = (1 - CONFIDENCE) / 2 * 100
    return point, (percentile(values, tail, True), percentile(values, 100 - tail, True)) if values else None


def _ratio(num: float, den: float) -> float:
    if num is None or den is None or math.isnan(num) or math.isnan(den) or den == 0:
        return math.nan
    return num / den


def with_interval(value: str, ci: tuple[float, float] | None, show: Callable[[float], str]) -> str:
    """'1.31 (1.22–1.40)', or the value alone where there is no interval."""
    return value if ci is None else f"{value} ({show(ci[0])}–{show(ci[1])})"
