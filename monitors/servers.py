"""What each serving engine exposes on its Prometheus `/metrics`, and the figures tokentop derives
from a series of scrapes: gauges as they are, counters as rates, histograms as quantiles of the
observations made inside a time window (bucket deltas, as Prometheus' histogram_quantile does).

Adding an engine is adding a table here, not a branch in the widgets. Every figure keeps the
name of the metric it came from, so the app can say where each number comes from.
The texts are parsed with prometheus_client's own parser, not by hand.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Figure:
    """One derived number. `how`: gauge (summed, or averaged with mean=True), rate (Δ/Δt of a
    counter), ratio (Δ of the first counter ÷ Δ of the second; with `add_num` the denominator is
    numerator + second), quantiles (of a histogram's observations in the window)."""

    how: str
    metrics: tuple[str, ...]
    mean: bool = False
    add_num: bool = False


@dataclass(frozen=True)
class EngineTable:
    name: str  # shown in the status line
    prefix: str  # what identifies the engine's metrics
    figures: dict[str, Figure]
    enable_metrics: str  # how to turn /metrics on, said when it is missing
    # Extra request fields that make the stream carry the server's own running token count.
    stream_extras: dict = field(default_factory=dict)
    kv_note: str = ""  # where the KV figure comes from when /metrics has none
    # The request field that bounds a reasoning model's thinking, where the engine takes one per request.
    think_budget: str = ""
    # The request field whose {"enable_thinking": false} turns the thinking off through the model's
    # chat template (Qwen3's, for one), where the engine passes it on.
    think_switch: str = ""


VLLM = EngineTable(
    "vLLM",
    "vllm:",
    {
        "kv_usage": Figure("gauge", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), mean=True),
        "running": Figure("gauge", ("vllm:num_requests_running",)),
        "waiting": Figure("gauge", ("vllm:num_requests_waiting",)),
        "ttft": Figure("quantiles", ("vllm:time_to_first_token_seconds",)),
        "itl": Figure("quantiles", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
        "e2e": Figure("quantiles", ("vllm:e2e_request_latency_seconds",)),
        "prompt_tps": Figure("rate", ("vllm:prompt_tokens_total",)),
        "gen_tps": Figure("rate", ("vllm:generation_tokens_total",)),
        "prefix_hit": Figure("ratio", ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")),
        "spec_accept": Figure("ratio", ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")),
        "preemptions": Figure("rate", ("vllm:num_preemptions_total",)),
    },
    "vLLM serves /metrics by default; check the URL (--metrics URL)",
    {"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    think_budget="thinking_token_budget",  # taken where the server runs a reasoning parser, else answered 400 with why
    think_switch="chat_template_kwargs",
)
SGLANG = EngineTable(
    "SGLang",
    "sglang:",
    {
        "kv_usage": Figure("gauge", ("sglang:token_usage",), mean=True),
        "running": Figure("gauge", ("sglang:num_running_reqs",)),
        "waiting": Figure("gauge", ("sglang:num_queue_reqs",)),
        "ttft": Figure("quantiles", ("sglang:time_to_first_token_seconds",)),
        "itl": Figure("quantiles", ("sglang:inter_token_latency_seconds",)),
        "e2e": Figure("quantiles", ("sglang:e2e_request_latency_seconds",)),
        "prompt_tps": Figure("rate", ("sglang:prompt_tokens_total",)),
        "gen_tps": Figure("rate", ("sglang:generation_tokens_total",)),
        "prefix_hit": Figure("gauge", ("sglang:cache_hit_rate",), mean=True),
        "spec_accept": Figure("gauge", ("sglang:spec_accept_rate",), mean=True),
        "preemptions": Figure("gauge", ("sglang:num_retracted_reqs",)),
    },
    "start SGLang with --enable-metrics",
    {"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    # Its chat API passes chat_template_kwargs to the template (SGLang's "Thinking Budget" docs);
    # its hard budgets are server options (--enable-strict-thinking, a logit processor).
    think_switch="chat_template_kwargs",
)
LLAMACPP = EngineTable(
    "llama.cpp",
    "llamacpp:",
    {
        "running": Figure("gauge", ("llamacpp:requests_processing",)),
        "waiting": Figure("gauge", ("llamacpp:requests_deferred",)),
        "prompt_tps": Figure("rate", ("llamacpp:prompt_tokens_total",)),
        "gen_tps": Figure("rate", ("llamacpp:tokens_predicted_total",)),
        "prefix_hit": Figure("ratio", ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"), add_num=True),
        "spec_accept": Figure("ratio", ("llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_draft_tokens_total")),
    },
    "start llama-server with --metrics",
    {"stream_options": {"include_usage": True}, "timings_per_token": True},
    kv_note="llama.cpp removed its KV gauges: our streams' context (timings) of the slot's n_ctx",
)
TGI = EngineTable(
    "TGI",
    "tgi_",
    {
        "running": Figure("gauge", ("tgi_batch_current_size",)),
        "waiting": Figure("gauge", ("tgi_queue_size",)),
        "itl": Figure("quantiles", ("tgi_request_mean_time_per_token_duration",)),
        "e2e": Figure("quantiles", ("tgi_request_duration",)),
        "gen_tps": Figure("rate", ("tgi_request_generated_tokens_sum",)),
    },
    "TGI serves /metrics by default; check the URL (--metrics URL)",
    {"stream_options": {"include_usage": True}},
    kv_note="TGI reports no KV cache figure",
)
OLLAMA = EngineTable(
    "Ollama",
    "ollama_",
    {},
    "this Ollama has no Prometheus /metrics (builds with it need OLLAMA_METRICS=1)",
    {"stream_options": {"include_usage": True}},
    kv_note="Ollama reports no KV cache figure",
)
DYNAMO = EngineTable(
    "Dynamo",
    "dynamo_",
    {
        "running": Figure("gauge", ("dynamo_frontend_inflight_requests",)),
        "waiting": Figure("gauge", ("dynamo_frontend_queued_requests",)),
        "ttft": Figure("quantiles", ("dynamo_frontend_time_to_first_token_seconds",)),
        "itl": Figure("quantiles", ("dynamo_frontend_inter_token_latency_seconds",)),
        "e2e": Figure("quantiles", ("dynamo_frontend_request_duration_seconds",)),
        "gen_tps": Figure("rate", ("dynamo_frontend_output_tokens_total",)),
    },
    "Dynamo's frontend serves /metrics on its HTTP port (its workers' on DYN_SYSTEM_PORT)",
    {"stream_options": {"include_usage": True}},
    kv_note="Dynamo's frontend reports no KV cache figure (its workers do)",
)
LMDEPLOY = EngineTable(
    "lmdeploy",
    "lmdeploy:",
    {  # lmdeploy/metrics/loggers.py's names (lmdeploy's main, 2026-08-21)
        "kv_usage": Figure("gauge", ("lmdeploy:gpu_cache_usage_perc",), mean=True),
        "running": Figure("gauge", ("lmdeploy:num_requests_running",)),
        "waiting": Figure("gauge", ("lmdeploy:num_requests_waiting",)),
        "ttft": Figure("quantiles", ("lmdeploy:time_to_first_token_seconds",)),
        "itl": Figure("quantiles", ("lmdeploy:iter_token_latency", "lmdeploy:time_per_output_token_seconds")),
        "e2e": Figure("quantiles", ("lmdeploy:e2e_request_latency_seconds",)),
        "prompt_tps": Figure("rate", ("lmdeploy:prompt_tokens_total",)),
        "gen_tps": Figure("rate", ("lmdeploy:generation_tokens_total",)),
        "prefix_hit": Figure("gauge", ("lmdeploy:prefix_cache_hit_rate",), mean=True),
        "spec_accept": Figure("ratio", ("lmdeploy:spec_decode_num_accepted_tokens_total", "lmdeploy:spec_decode_num_draft_tokens_total")),
    },
    "lmdeploy serves /metrics unless started with --disable-metrics; check the URL (--metrics URL)",
    {"stream_options": {"include_usage": True}},
    think_switch="chat_template_kwargs",
)
OPENAI = EngineTable("OpenAI-compatible", "", {}, "this server answers no Prometheus /metrics", {"stream_options": {"include_usage": True}})

# A vLLM worker run by Dynamo exports both prefixes: vLLM's own figures come first.
ENGINES = (VLLM, SGLANG, LMDEPLOY, LLAMACPP, TGI, DYNAMO, OLLAMA)
BY_NAME = {e.name: e for e in (*ENGINES, OPENAI)}

# Shown beside each figure: what it is, in the panes' words.
FIGURE_LABELS = {
    "kv_usage": "KV usage",
    "running": "running",
    "waiting": "waiting",
    "ttft": "TTFT",
    "itl": "ITL",
    "e2e": "e2e",
    "prompt_tps": "prompt tok/s",
    "gen_tps": "gen tok/s",
    "prefix_hit": "prefix hits",
    "spec_accept": "spec accepted",
    "preemptions": "preemptions/s",
    "rss": "server RSS",
}


def engine_from_metrics(names: set[str]) -> EngineTable | None:
    """The engine whose metric prefix the scrape shows, or None."""
    for engine in ENGINES:
        if any(n.startswith(engine.prefix) for n in names):
            return engine
    return None


Samples = dict[str, list[tuple[dict, float]]]  # sample name → [(labels, value)]


class MetricsParseError(ValueError):
    pass


def parse_metrics(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by sample name (counters keep `_total`,
    histograms their `_bucket`/`_sum`/`_count` names)."""
    out: Samples = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not a Prometheus text exposition ({exc})") from None
    return out


@dataclass
class Scrape:
    t: float  # seconds, monotonic
    samples: Samples


def _total(samples: Samples, name: str, mean: bool = False) -> float | None:
    vals = [v for labels, v in samples.get(name, ()) if "le" not in labels and not math.isnan(v)]
    if not vals:
        return None
    return sum(vals) / len(vals) if mean else sum(vals)


def _buckets(samples: Samples, name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over the other labels (engines, models)."""
    out: dict[float, float] = {}
    for labels, v in samples.get(name + "_bucket", ()):
        le = float(labels["le"])
        out[le] = out.get(le, 0.0) + v
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over cumulative counts: linear within the bucket that holds
    the q-th observation; the +Inf bucket answers with the largest finite bound."""
    bounds = sorted(buckets)
    if not bounds:
        return math.nan
    total = buckets[bounds[-1]]
    if total <= 0:
        return math.nan
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for b in bounds:
        count = buckets[b]
        if count >= rank:
            if math.isinf(b):
                return prev_bound
            if count == prev_count:
                return b
            return prev_bound + (b - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = b, count
    return prev_bound


@dataclass
class Quantiles:
    p50: float
    p95: float
    p99: float
    mean: float
    n: float


class MetricsWindow:
    """Scrapes over time (a ring buffer) and the figures of the last `window_s` seconds."""

    def __init__(self, engine: EngineTable, window_s: float = 10.0, keep: int = 600):
        self.engine = engine
        self.window_s = window_s
        self.scrapes: deque[Scrape] = deque(maxlen=keep)

    def add(self, samples: Samples, t: float | None = None) -> None:
        self.scrapes.append(Scrape(time.monotonic() if t is None else t, samples))
        # The figures read the newest scrape and the last one at least window_s older: any before
        # that is memory only (a vLLM page parses to tens of KB; 600 of them took the client's RSS
        # ten minutes to level off).
        newest = self.scrapes[-1].t
        while len(self.scrapes) > 2 and newest - self.scrapes[1].t >= self.window_s:
            self.scrapes.popleft()

    def _base(self) -> Scrape | None:
        """The oldest scrape inside the window (before the newest), for deltas."""
        if len(self.scrapes) < 2:
            return None
        newest = self.scrapes[-1]
        base = None
        for s in reversed(list(self.scrapes)[:-1]):
            base = s
            if newest.t - s.t >= self.window_s:
                break
        return base

    def figures(self) -> tuple[dict[str, object], dict[str, str]]:
        """(values, sources): each figure's value and the metric it came from. A figure whose
        metric the server does not export is absent; one that needs two scrapes is None until then."""
        values: dict[str, object] = {}
        sources: dict[str, str] = {}
        if not self.scrapes:
            return values, sources
        new = self.scrapes[-1]
        base = self._base()
        dt = (new.t - base.t) if base else 0.0
        for key, fig in self.engine.figures.items():
            name = next((m for m in fig.metrics if m in new.samples or m + "_bucket" in new.samples), None)
            if name is None:
                continue
            sources[key] = name
            if fig.how == "gauge":
                values[key] = _total(new.samples, name, fig.mean)
            elif fig.how == "rate":
                a = _total(new.samples, name)
                # A labelled series born between the scrapes started at zero.
                b = (_total(base.samples, name) or 0.0) if base else None
                values[key] = (a - b) / dt if a is not None and b is not None and dt > 0 else None
            elif fig.how == "ratio":
                other = fig.metrics[1]
                sources[key] = f"Δ{name} ÷ Δ{other}" if not fig.add_num else f"Δ{name} ÷ (Δ{name} + Δ{other})"
                values[key] = None
                if base is not None:
                    num = (_total(new.samples, name) or 0.0) - (_total(base.samples, name) or 0.0)
                    den = (_total(new.samples, other) or 0.0) - (_total(base.samples, other) or 0.0)
                    if fig.add_num:
                        den += num
                    values[key] = num / den if den > 0 else None
            elif fig.how == "quantiles":
                values[key] = None
                if base is not None:
                    nb, bb = _buckets(new.samples, name), _buckets(base.samples, name)
                    delta = {le: c - bb.get(le, 0.0) for le, c in nb.items()}
                    n = _total(new.samples, name + "_count")
                    n0 = _total(base.samples, name + "_count") if base else None
                    s1, s0 = _total(new.samples, name + "_sum"), _total(base.samples, name + "_sum")
                    count = (n or 0.0) - (n0 or 0.0)
                    if count > 0:
                        mean = ((s1 or 0.0) - (s0 or 0.0)) / count
                        values[key] = Quantiles(histogram_quantile(0.5, delta), histogram_quantile(0.95, delta), histogram_quantile(0.99, delta), mean, count)
        rss = _total(new.samples, "process_resident_memory_bytes")
        if rss is not None:
            values["rss"] = rss
            sources["rss"] = "process_resident_memory_bytes"
        return values, sources


def json_safe(values: dict) -> dict:
    """A scrape's figures as JSON takes them: quantiles as their fields, NaN as null."""
    out = {}
    for k, v in values.items():
        if isinstance(v, Quantiles):
            v = {"p50": v.p50, "p95": v.p95, "p99": v.p99, "mean": v.mean, "n": v.n}
        if isinstance(v, float) and math.isnan(v):
            v = None
        if isinstance(v, dict):
            v = {a: (None if isinstance(b, float) and math.isnan(b) else b) for a, b in v.items()}
        out[k] = v
    return out
