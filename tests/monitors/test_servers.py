"""Server metric figures from Prometheus texts. vLLM, SGLang and lmdeploy write their /metrics with
prometheus_client, so their texts are made here the same way, with their metric names; TGI's
(metrics-exporter-prometheus, Rust) is written out as it serves it. The quantiles are checked
against values worked out by hand from the bucket counts."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from monitors.servers import LLAMACPP, LMDEPLOY, SGLANG, TGI, VLLM, MetricsParseError, MetricsWindow, engine_from_metrics, histogram_quantile, parse_metrics


def vllm_registry():
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    m = {
        "kv": Gauge("vllm:kv_cache_usage_perc", "KV-cache usage", labels, registry=reg),
        "running": Gauge("vllm:num_requests_running", "running", labels, registry=reg),
        "waiting": Gauge("vllm:num_requests_waiting", "waiting", labels, registry=reg),
        "gen": Counter("vllm:generation_tokens", "generation tokens", labels, registry=reg),
        "prompt": Counter("vllm:prompt_tokens", "prompt tokens", labels, registry=reg),
        "hits": Counter("vllm:prefix_cache_hits", "hits", labels, registry=reg),
        "queries": Counter("vllm:prefix_cache_queries", "queries", labels, registry=reg),
        "preempt": Counter("vllm:num_preemptions", "preemptions", labels, registry=reg),
        "ttft": Histogram("vllm:time_to_first_token_seconds", "TTFT", labels, buckets=(0.1, 0.2, 0.4, 0.8), registry=reg),
        "itl": Histogram("vllm:inter_token_latency_seconds", "ITL", labels, buckets=(0.01, 0.02, 0.04), registry=reg),
    }
    return reg, m


def test_engine_is_told_by_its_metric_prefix():
    reg, m = vllm_registry()
    m["running"].labels("llama", "0").set(1)
    assert engine_from_metrics(set(parse_metrics(generate_latest(reg).decode()))) is VLLM
    assert engine_from_metrics({"sglang:token_usage"}) is SGLANG
    assert engine_from_metrics({"llamacpp:requests_processing"}) is LLAMACPP
    assert engine_from_metrics({"tgi_queue_size"}) is TGI
    assert engine_from_metrics({"lmdeploy:num_requests_running"}) is LMDEPLOY
    assert engine_from_metrics({"process_cpu_seconds_total"}) is None


def test_vllm_gauges_rates_ratios_and_window_quantiles():
    reg, m = vllm_registry()
    engines = [m["kv"].labels("llama", str(e)) for e in (0, 1)]  # data parallel: two engines
    for name in ("preempt", "itl"):  # vLLM makes its series up front; these stay at zero
        m[name].labels("llama", "0")
    w = MetricsWindow(VLLM, window_s=10.0)
    for h, v in (("ttft", 0.05), ("ttft", 0.15)):  # before the window: not in its quantiles
        m[h].labels("llama", "0").observe(v)
    w.add(parse_metrics(generate_latest(reg).decode()), t=0.0)
    engines[0].set(0.25)
    engines[1].set(0.75)
    m["running"].labels("llama", "0").set(3)
    m["running"].labels("llama", "1").set(2)
    m["waiting"].labels("llama", "0").set(1)
    m["gen"].labels("llama", "0").inc(500)
    m["gen"].labels("llama", "1").inc(300)
    m["prompt"].labels("llama", "0").inc(2000)
    m["hits"].labels("llama", "0").inc(30)
    m["queries"].labels("llama", "0").inc(120)
    # 10 TTFTs in the window: 4 in (0.1, 0.2], 6 in (0.2, 0.4].
    for v in [0.15] * 4 + [0.3] * 6:
        m["ttft"].labels("llama", "1").observe(v)
    w.add(parse_metrics(generate_latest(reg).decode()), t=4.0)
    values, sources = w.figures()
    assert values["kv_usage"] == pytest.approx(0.5)  # mean over the engines
    assert values["running"] == 5 and values["waiting"] == 1  # summed over the engines
    assert values["gen_tps"] == pytest.approx(800 / 4.0)
    assert values["prompt_tps"] == pytest.approx(2000 / 4.0)
    assert values["prefix_hit"] == pytest.approx(30 / 120)
    assert values["preemptions"] == 0
    q = values["ttft"]
    assert q.n == 10
    # p50: rank 5 lies in (0.2, 0.4] holding ranks 4..10: 0.2 + 0.2 × (5 − 4) / 6.
    assert q.p50 == pytest.approx(0.2 + 0.2 * 1 / 6)
    # p95: rank 9.5 in the same bucket: 0.2 + 0.2 × 5.5 / 6.
    assert q.p95 == pytest.approx(0.2 + 0.2 * 5.5 / 6)
    assert q.mean == pytest.approx((4 * 0.15 + 6 * 0.3) / 10)
    assert values["itl"] is None  # no observations in the window
    assert sources["kv_usage"] == "vllm:kv_cache_usage_perc"
    assert sources["ttft"] == "vllm:time_to_first_token_seconds"
    assert "spec_accept" not in values  # not exported unless speculation is on


def test_histogram_quantile_edges():
    assert math.isnan(histogram_quantile(0.5, {}))
    assert math.isnan(histogram_quantile(0.5, {0.1: 0.0, math.inf: 0.0}))
    # Everything above the last finite bound: the bound is the answer, as in Prometheus.
    assert histogram_quantile(0.99, {0.1: 0.0, 1.0: 0.0, math.inf: 5.0}) == 1.0
    # The first bucket interpolates from zero.
    assert histogram_quantile(0.5, {0.1: 4.0, math.inf: 4.0}) == pytest.approx(0.05)


SGLANG_TEXT = """# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.42
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 7.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 2.0
# HELP sglang:cache_hit_rate The prefix cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.61
# HELP sglang:spec_accept_rate The speculative acceptance rate
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="qwen"} 0.7
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} 1000.0
"""

TGI_TEXT = """# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.01"} 0
tgi_request_mean_time_per_token_duration_bucket{le="0.02"} 10
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 10
tgi_request_mean_time_per_token_duration_sum 0.15
tgi_request_mean_time_per_token_duration_count 10
"""


def test_sglang_gauges_and_tgi_without_kv():
    w = MetricsWindow(SGLANG)
    w.add(parse_metrics(SGLANG_TEXT), t=0.0)
    values, sources = w.figures()
    assert values["kv_usage"] == pytest.approx(0.42) and sources["kv_usage"] == "sglang:token_usage"
    assert (values["running"], values["waiting"], values["prefix_hit"], values["spec_accept"]) == (7, 2, 0.61, 0.7)
    assert values["gen_tps"] is None  # a rate needs two scrapes
    w = MetricsWindow(TGI)
    w.add(parse_metrics(TGI_TEXT.replace("} 10", "} 0").replace("_sum 0.15", "_sum 0").replace("_count 10", "_count 0")), t=0.0)
    w.add(parse_metrics(TGI_TEXT), t=1.0)
    values, _ = w.figures()
    assert (values["running"], values["waiting"]) == (16, 4)
    assert "kv_usage" not in values and TGI.kv_note == "TGI reports no KV cache figure"
    assert values["itl"].p50 == pytest.approx(0.015) and values["itl"].mean == pytest.approx(0.015)


def test_lmdeploys_gauges_counters_and_histograms():
    """Made as lmdeploy/metrics/loggers.py makes them: its names, labels and the ITL's buckets."""
    reg, labels = CollectorRegistry(), ["model_name", "engine"]
    kv = Gauge("lmdeploy:gpu_cache_usage_perc", "KV", labels, registry=reg).labels("qwen", "0")
    hit = Gauge("lmdeploy:prefix_cache_hit_rate", "hits", labels, registry=reg).labels("qwen", "0")
    running = Gauge("lmdeploy:num_requests_running", "running", labels, registry=reg).labels("qwen", "0")
    gen = Counter("lmdeploy:generation_tokens", "gen", labels, registry=reg).labels("qwen", "0")
    drafted = Counter("lmdeploy:spec_decode_num_draft_tokens", "drafts", labels, registry=reg).labels("qwen", "0")
    accepted = Counter("lmdeploy:spec_decode_num_accepted_tokens", "accepted", labels, registry=reg).labels("qwen", "0")
    buckets = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1)
    itl = Histogram("lmdeploy:iter_token_latency", "ITL", labels, buckets=buckets, registry=reg).labels("qwen", "0")
    w = MetricsWindow(LMDEPLOY)
    w.add(parse_metrics(generate_latest(reg).decode()), t=0.0)
    kv.set(0.3)
    hit.set(0.5)
    running.set(4)
    gen.inc(200)
    drafted.inc(100)
    accepted.inc(60)
    for v in (0.02,) * 10:
        itl.observe(v)
    text = generate_latest(reg).decode()
    assert engine_from_metrics(set(parse_metrics(text))) is LMDEPLOY
    w.add(parse_metrics(text), t=2.0)
    values, sources = w.figures()
    assert (values["kv_usage"], values["prefix_hit"], values["running"]) == (0.3, 0.5, 4)
    assert values["gen_tps"] == pytest.approx(100.0) and values["spec_accept"] == pytest.approx(0.6)
    assert values["itl"].p50 == pytest.approx(0.0175) and sources["itl"] == "lmdeploy:iter_token_latency"  # the 10–25 ms bucket's middle


def test_a_text_that_is_not_prometheus_is_one_clear_error():
    with pytest.raises(MetricsParseError, match="not a Prometheus text exposition"):
        parse_metrics("<html><body>hello</body></html>\n{{{")
