"""The fleet's latency quantiles on real vLLM (llama.cpp exports no latency histogram): the session's
real Prometheus scrapes the session's real vLLM, tokentop's own requests are its only traffic in
the window, and the fleet's TTFT p50 and p99 (histogram_quantile over the summed bucket rates)
must fall in the bucket that holds those requests' own TTFTs; its KV gauge against /metrics."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from benchmarks.common.deadline import Deadline
from monitors.fleet import Fleet, Selector
from monitors.prometheus import Prometheus
from monitors.servers import parse_metrics
from tests.helpers.prometheus import group
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.core.session import Session
from tui_app.requests import RunRequest

pytestmark = pytest.mark.vllm
REQUESTS = 6


def quantile(values: list[float], q: float) -> float:
    """The q-th of the observations as histogram_quantile ranks them: the ceil(q·n)-th smallest."""
    ranked = sorted(values)
    return ranked[min(max(int(-(-q * len(ranked) // 1)) - 1, 0), len(ranked) - 1)]


async def quiet(url: str) -> float:
    """The server's count of first tokens once nothing runs or waits and it has stood still for two
    seconds: a request of an earlier test still going (the tier shares one vLLM) would otherwise land
    in the window (a p99 of 0.24 s beside our 0.08-0.10, once)."""
    last, deadline = None, Deadline(60)
    while not deadline.passed():
        m = parse_metrics(httpx.get(url + "/metrics").text)
        busy = sum(v for name in ("vllm:num_requests_running", "vllm:num_requests_waiting") for _, v in m[name])
        count = sum(v for _, v in m["vllm:time_to_first_token_seconds_count"])
        if busy == 0 and count == last:
            return count
        last = count if busy == 0 else None
        await asyncio.sleep(2)
    raise AssertionError(f"vLLM at {url} did not go quiet within 60 s")


# Our requests' prompt: some 300 tokens, so that each TTFT is a prefill well above the short
# requests' sent before the window (a few tokens): those fill every bucket at and above ours.
LONG = " ".join(["The river runs past the old mill, under the bridge and between the green hills."] * 18)


async def requests(url: str, n: int, long: bool = False) -> list[float]:
    """n requests one after another (`long`: the long prompt, led by a number of its own each, so
    that vLLM's prefix cache serves none of it): their TTFTs as tokentop measured them."""
    session = Session()
    client = ServerClient(AttachConfig(url=url), session.feed)
    base = random.SystemRandom().randrange(1_000_000)
    try:
        await client.connect()
        for i in range(n):
            prompt = f"{base + i}. {LONG}" if long else "Name a colour."
            await client.run(RunRequest(prompt=prompt, max_new_tokens=4, ignore_eos=True))
    finally:
        await client.aclose()
    return [rec.total.ttft_s for rec in session.timer.runs.values()]


async def test_fleet_ttft_quantiles_hold_our_own_requests_ttfts(prometheus, vllm_url):
    port = vllm_url.rsplit(":", 1)[1]
    prometheus.set_targets("vllm", [group("vllm", f"127.0.0.1:{port}")])
    try:
        prometheus.wait_up("vllm", 1)
        bounds = sorted({float(labels["le"]) for labels, _ in parse_metrics(httpx.get(vllm_url + "/metrics").text)["vllm:time_to_first_token_seconds_bucket"]})
        await requests(vllm_url, 2 * REQUESTS)  # before the window, short: see the bounds below
        before = await quiet(vllm_url)
        await asyncio.sleep(3)  # Prometheus holds the histogram as it was before our requests
        start = time.time()
        ours = await requests(vllm_url, REQUESTS, long=True)
        assert len(ours) == REQUESTS
        assert await quiet(vllm_url) - before == REQUESTS  # ours alone in the window
        await asyncio.sleep(2.5)  # two scrapes
        prom = Prometheus(prometheus.url)
        try:
            # A window that begins just before our first request: no other traffic in it.
            fleet = Fleet(prom, Selector('{job="vllm"}'), window_s=time.time() - start + 1)
            _, rows, figures, notes = await fleet.refresh()
            kv = parse_metrics(httpx.get(vllm_url + "/metrics").text)["vllm:kv_cache_usage_perc"][0][1]
        finally:
            await prom.aclose()
    finally:
        prometheus.set_targets("vllm", [])
    assert notes == []
    (row,) = rows
    assert row["family"] == "vLLM" and row["kv_usage"] == kv
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        mine = quantile(ours, q)
        # Our TTFT runs from the request's sending, the server's from its arrival: up to 0.2 s less.
        lo = max(b for b in [0.0, *bounds] if b <= max(mine - 0.2, 0.0))
        # rate() extrapolates each bucket's series to the window's start, but no further back than
        # where that counter would reach zero: a bucket that held none of the server's earlier
        # requests is scaled less than the buckets above it, and the quantile moves up. Seen: p50
        # 1.0009 s against ours 0.888 s (bound 1.0), 0.0619 s against 0.0585 (bound 0.06). So the
        # figure is held within the buckets our own requests span, up to the bound over our slowest;
        # and twice as many requests, sent before the window, fill those buckets first, so none starts
        # from zero (without them, once in CI: p99 0.078 s against ours 0.059, bound 0.06). Those were
        # once of the same kind as ours, and landed above ours' bucket, which then held none of them
        # (2026-11-30: p99 0.0779 s against ours 0.050-0.060, bound 0.06): they are now short, ours
        # long, so theirs are the faster by a prefill of some 300 tokens and fall at or below ours.
        hi = min(b for b in bounds if b >= max(ours))
        got = figures["ttft"][name]
        assert lo <= got <= hi, (name, got, mine, lo, hi, sorted(ours))
        assert row["ttft"][name] == pytest.approx(got)  # one replica: its row and the fleet's are the same buckets
