"""Attach against real vLLM (its CPU build, in a venv of its own that `make test` installs) on the
default model's safetensors copy: streamed token counts against its usage, client timing against
its own histograms for the same request, its KV gauge, and concurrent streams."""

from __future__ import annotations

import asyncio

import pytest

from monitors.events import ServerSample, Step
from monitors.servers import parse_metrics
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.core.session import Session
from tui_app.requests import RunRequest

pytestmark = pytest.mark.vllm


def histogram_delta(before: dict, after: dict, name: str) -> tuple[float, float]:
    def total(samples, suffix):
        return sum(v for _, v in samples.get(name + suffix, ()))

    return total(after, "_sum") - total(before, "_sum"), total(after, "_count") - total(before, "_count")


async def test_vllm_stream_against_its_own_counts_and_histograms(vllm_url):
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=vllm_url), session.feed)
    try:
        ready = await client.connect()
        assert ready.device == "vLLM" and ready.server["pid"] is not None
        before = parse_metrics((await client.http.get(vllm_url + "/metrics")).text)
        fin = await client.run(RunRequest(prompt="Count from one to fifty.", max_new_tokens=32, ignore_eos=True))
        after = parse_metrics((await client.http.get(vllm_url + "/metrics")).text)
        sample = await client.sample()
    finally:
        await client.aclose()
    steps = [e for e in events if isinstance(e, Step)]
    assert fin.server["tokens_from"] == "server running count"
    assert fin.n_tokens == fin.server["server_tokens"] == 32 == sum(s.n_tokens for s in steps)
    st = session.timer.runs[fin.run_id].total
    ttft_sum, ttft_n = histogram_delta(before, after, "vllm:time_to_first_token_seconds")
    itl_sum, itl_n = histogram_delta(before, after, "vllm:inter_token_latency_seconds")
    assert ttft_n == 1 and itl_n == 31
    assert st.ttft_s >= ttft_sum  # the server's TTFT starts when the request reaches it
    assert st.ttft_s - ttft_sum < 0.2
    assert st.itl.mean == pytest.approx(itl_sum / itl_n, rel=0.05)
    assert sample.sources["kv_usage"] == "vllm:kv_cache_usage_perc" and 0 <= sample.values["kv_usage"] <= 1
    assert sample.sources["rss"] == "process_resident_memory_bytes"


async def test_vllm_runs_concurrent_streams_and_counts_them(vllm_url):
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=vllm_url, concurrency=4, metrics_hz=8), session.feed)
    await client.connect()
    metrics = asyncio.create_task(client.metrics_loop())
    try:
        fin = await client.run(RunRequest(prompt="Describe a forest.", max_new_tokens=24, ignore_eos=True))
    finally:
        metrics.cancel()
        await asyncio.gather(metrics, return_exceptions=True)
        await client.aclose()
    assert fin.n_tokens == 96
    running = [e.values["running"] for e in events if isinstance(e, ServerSample) and e.values.get("running") is not None]
    assert max(running) == 4  # vllm:num_requests_running saw the four streams together
    assert len([r for r in session.rows() if r.run_id == fin.run_id]) == 5
