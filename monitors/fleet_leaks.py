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

GPU memory, where a DCGM exporter reports it (`DCGM_FI_DEV_FB_USED`, MiB a GPU), is fitted the
same way for the replica whose pod holds the GPU: dcgm-exporter's Kubernetes mapping labels each
GPU with the pod using it (`pod`, or `exported_pod` once Prometheus keeps the target's own), and
a replica scraped through Kubernetes' discovery carries its `pod`. Without that mapping a GPU
cannot be told to be any replica's, and none is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitors.fleet import Selector, _tag, duration_text, figure_query
from monitors.leaks import MB, slope_interval
from monitors.prometheus import QUERY, Prometheus, PrometheusError

MEMORY = "process_resident_memory_bytes"
GPU_MEMORY = "DCGM_FI_DEV_FB_USED"  # MiB, each GPU's framebuffer in use
SPAN_S = 900.0  # a quarter of an hour of scrapes: a few MB an hour shows above a server's noise
STEP_S = 15.0
EVERY_S = 30.0  # refitted at most this often: the range query is the heaviest the fleet asks
MIN_POINTS = 8
MIN_RISE_MB = 4.0
LOAD_FLAT = 0.10
FITTED = {
    "RSS": f"{MEMORY} fitted against time, beside generated tokens/s",
    "GPU mem": f"{GPU_MEMORY} of its pod's GPUs fitted against time, beside generated tokens/s",
}


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
    what: str = "RSS"  # or "GPU mem": FITTED's keys

    @property
    def flagged(self) -> bool:
        rising = self.low * self.span_s / 3600 >= MIN_RISE_MB
        return rising and self.load_change is not None and self.load_change < LOAD_FLAT

    def mark(self) -> str:
        return f"{self.what} +{self.mb_per_h:.0f} MB/h, load flat"

    def text(self) -> str:
        load = f"its generated tokens/s {self.load_change:+.0%} over the same span" if self.load_change is not None else "no load series"
        return (
            f"{'GPU memory' if self.what == 'GPU mem' else 'memory'} {self.mb_per_h:+.1f} MB/h "
            f"(95 % {self.low:+.1f} to {self.high:+.1f}) to {self.last_mb:.0f} MB "
            f"over the last {duration_text(self.span_s)} ({self.points} points), {load}"
        )


def trend(memory: list[tuple[float, float]], load: list[tuple[float, float]] | None, span_s: float, what: str = "RSS") -> MemoryTrend | None:
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
    return MemoryTrend(slope * 3600, low * 3600, high * 3600, memory[-1][1] / MB, change, len(memory), span_s, what)


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
    trends: dict = field(default_factory=dict)  # (job, instance) → [MemoryTrend of RSS, then of GPU memory where fitted]
    fitted_at: float = -1e18
    said: set = field(default_factory=set)
    error: str = ""

    def __post_init__(self) -> None:
        load = figure_query("gen_tps", self.selector, duration_text(self.window_s))
        by = " by (job, instance)"
        gpu = f'label_replace({GPU_MEMORY}, "pod", "$1", "exported_pod", "(.+)")'  # the pod's own name, kept or not
        self.query = " or ".join(
            [
                _tag(f"sum by (job, instance, pod) ({self.selector(MEMORY)})", tt_fig="memory"),
                _tag(f"sum{by} ({load})", tt_fig="load"),
                _tag(f"sum by (pod) ({gpu}) * {MB}", tt_fig="gpu"),
            ]
        )

    async def read(self, end: float) -> dict:
        matrix = await self.prom.query_range(self.query, end - self.span_s, end, self.step_s)
        series: dict = {}
        gpus, pods = {}, {}
        for labels, points in matrix:
            kept = [(t, v) for t, v in points if v == v]
            if labels.get("tt_fig") == "gpu":
                if labels.get("pod"):  # GPUs no pod holds are summed apart, and are no replica's
                    gpus[labels["pod"]] = kept
                continue
            key = (labels.get("job", ""), labels.get("instance", ""))
            series.setdefault(key, {})[labels.get("tt_fig")] = kept
            if labels.get("pod"):
                pods[key] = labels["pod"]
        out = {}
        for key, figs in series.items():
            fitted = [trend(figs.get("memory") or [], figs.get("load"), self.span_s)]
            fitted.append(trend(gpus.get(pods.get(key, ""), []), figs.get("load"), self.span_s, "GPU mem"))
            if any(fitted):
                out[key] = [t for t in fitted if t is not None]
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
            if r.get("server"):
                continue
            for found in self.trends.get(key, ()):
                r["memory_trend" if found.what == "RSS" else "gpu_memory_trend"] = found.text()
                said = (*key, found.what)
                if found.flagged:
                    r.setdefault("marks", []).append(found.mark())
                    if said not in self.said:
                        self.said.add(said)
                        notes.append(f"leak sentinel: {key[1]} ({key[0]}) {found.text()} ({FITTED[found.what]})")
                else:
                    self.said.discard(said)
        return notes
