"""The fleet's leak sentinel: each replica's resident memory (`process_resident_memory_bytes`, which
Python servers such as vLLM, SGLang and TGI's router export through prometheus_client) over the
last `span_s`, read from Prometheus with one `query_range` beside the replica's load (generated
tokens a second, monitors.servers' tables), and fitted against time as the engine's baselines are
fitted against runs (monitors/leaks.py: a least-squares slope and its 95 % interval).

A replica is flagged when even the low end of its memory's interval rises by MIN_RISE_MB over the
span while its load, fitted the same way, rises by less than LOAD_FLAT of its mean: memory that
serving more explains is not a leak, memory that climbs at the same load is. The fit treats the
scrapes as independent; they are not quite (memory moves in steps), which is why the rise must
clear MIN_RISE_MB at the interval's low end rather than only be above zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitors.fleet import Selector, _tag, duration_text, figure_query
from monitors.leaks import MB, slope_interval
from monitors.prometheus import QUERY, Prometheus, PrometheusError

MEMORY = "process_resident_memory_bytes"
SPAN_S = 900.0  # a quarter of an hour of scrapes: a few MB an hour shows above a server's noise
STEP_S = 15.0
EVERY_S = 30.0  # refitted at most this often: the range query is the heaviest the fleet asks
MIN_POINTS = 8
MIN_RISE_MB = 4.0
LOAD_FLAT = 0.10
FITTED = f"{MEMORY} fitted against time, beside generated tokens/s"


@dataclass(frozen=True)
class MemoryTrend:
    """One replica's resident memory over the span: MB an hour with its 95 % interval, and its
    load's fitted change over the same span as a share of its mean (None: no load series)."""

    mb_per_h: float
    low: float
    high: float
    last_mb: float
    load_change: float | None
    points: int
    span_s: float

    @property
    def flagged(self) -> bool:
        rising = self.low * self.span_s / 3600 >= MIN_RISE_MB
        return rising and self.load_change is not None and self.load_change < LOAD_FLAT

    def mark(self) -> str:
        return f"RSS +{self.mb_per_h:.0f} MB/h, load flat"

    def text(self) -> str:
        load = f"its generated tokens/s {self.load_change:+.0%} over the same span" if self.load_change is not None else "no load series"
        return (
            f"memory {self.mb_per_h:+.1f} MB/h (95 % {self.low:+.1f} to {self.high:+.1f}) to {self.last_mb:.0f} MB "
            f"over the last {duration_text(self.span_s)} ({self.points} points), {load}"
        )


def trend(memory: list[tuple[float, float]], load: list[tuple[float, float]] | None, span_s: float) -> MemoryTrend | None:
    """The fit of one replica's (unix s, bytes) points and its load's (unix s, tokens/s); None with
    too few points for an interval."""
    if len(memory) < MIN_POINTS:
        return None
    t0 = memory[0][0]
    slope, low, high = slope_interval([b / MB for _, b in memory], [t - t0 for t, _ in memory])
    change = None
    if load and len(load) >= MIN_POINTS:
        mean = sum(v for _, v in load) / len(load)
        load_slope, _, _ = slope_interval([v for _, v in load], [t - t0 for t, _ in load])
        rise = load_slope * (load[-1][0] - load[0][0])
        change = rise / mean if mean > 0 else (0.0 if rise <= 0 else float("inf"))
    return MemoryTrend(slope * 3600, low * 3600, high * 3600, memory[-1][1] / MB, change, len(memory), span_s)


@dataclass
class Sentinel:
    """Refits every replica at most every `every_s`; `apply` marks the rows of those flagged and
    says each newly flagged one once, with its figures and what they were fitted against."""

    prom: Prometheus
    selector: Selector
    window_s: float = 60.0  # the rate window of the load, as the fleet's rows
    span_s: float = SPAN_S
    step_s: float = STEP_S
    every_s: float = EVERY_S
    trends: dict = field(default_factory=dict)  # (job, instance) → MemoryTrend
    fitted_at: float = -1e18
    said: set = field(default_factory=set)
    error: str = ""

    def __post_init__(self) -> None:
        load = figure_query("gen_tps", self.selector, duration_text(self.window_s))
        by = " by (job, instance)"
        self.query = f"{_tag(f'sum{by} ({self.selector(MEMORY)})', tt_fig='memory')} or {_tag(f'sum{by} ({load})', tt_fig='load')}"

    async def read(self, end: float) -> dict:
        matrix = await self.prom.query_range(self.query, end - self.span_s, end, self.step_s)
        series: dict = {}
        for labels, points in matrix:
            key = (labels.get("job", ""), labels.get("instance", ""))
            series.setdefault(key, {})[labels.get("tt_fig")] = [(t, v) for t, v in points if v == v]
        out = {}
        for key, figs in series.items():
            fitted = trend(figs.get("memory") or [], figs.get("load"), self.span_s)
            if fitted is not None:
                out[key] = fitted
        return out

    async def apply(self, rows: list[dict], ts: float) -> list[str]:
        """Marks the rows (their `marks` and `memory_trend`); the notes to say, each once."""
        notes = []
        if ts - self.fitted_at >= self.every_s:
            self.fitted_at = ts
            try:
                self.trends = await self.read(ts)
                self.error = ""
            except PrometheusError as exc:
                if exc.kind != QUERY:
                    raise
                if str(exc) != self.error:
                    self.error = str(exc)
                    notes.append(f"{exc} (the query for the leak sentinel: {exc.query})")
        for r in rows:
            key = (r.get("job", ""), r.get("instance", ""))
            found = self.trends.get(key)
            if found is None or r.get("server"):
                continue
            r["memory_trend"] = found.text()
            if found.flagged:
                r.setdefault("marks", []).append(found.mark())
                if key not in self.said:
                    self.said.add(key)
                    notes.append(f"leak sentinel: {key[1]} ({key[0]}) {found.text()} ({FITTED})")
            else:
                self.said.discard(key)
        return notes
