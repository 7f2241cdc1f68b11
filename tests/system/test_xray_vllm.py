"""Request X-ray against real vLLM (its CPU build) exporting its spans over OTLP/HTTP to tokentop's
receiver, with a scheduler of two sequences: four concurrent streams, so two of them queue."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.common.deadline import Deadline
from monitors.events import OtlpStatus
from monitors.xray import SPAN_PHASES
from tests.helpers.vllm import Spec, ahead, free_port, served
from tui_app.attach.client import AttachConfig
from tui_app.attach.loop import Servers
from tui_app.core.session import Session
from tui_app.requests import RunRequest

pytestmark = pytest.mark.vllm
# Two sequences at a time; spans exported every 200 ms instead of the SDK's 5 s, so a test waits less.
FLAGS = ("--max-num-seqs", "2")
ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200"}
# Tolerances, on a 2-core machine that runs vLLM's API server, its engine core and this client.
# The queued pair's wait as the client saw it (its mean TTFT less the first pair's) against the
# spans' own account of the same difference: queue, plus the prefill and the front (arrival to the
# engine's queue: the engine core takes a new request between two steps, so a request that comes
# during a prefill waits for it there) the pairs differ by; within QUEUE_TOL_S, the client's
# two ways over the loopback and its reading of the stream. The span's e2e and its TTFT are timed
# in vLLM's API process, its queue, prefill and decode in the engine core: what the e2e holds
# beyond the TTFT and the decode (the tail: the last token's way out) within TAIL_TOL_S of zero.
QUEUE_TOL_S = 0.15
TAIL_TOL_S = 0.05


@ahead("traced")
def traced_vllm(folder) -> Spec:
    address = f"127.0.0.1:{free_port()}"
    return Spec((*FLAGS, "--otlp-traces-endpoint", f"http://{address}/v1/traces"), ENV, extra=address)


@pytest.fixture(scope="module")
def traced(vllm_ahead):
    """(vLLM's URL, the OTLP receiver's address it posts to)."""
    return served(vllm_ahead, "traced")


async def run_traced(url: str, address: str, concurrency: int, tokens: int, prompt: str = "Describe a forest in detail.") -> tuple[Session, int]:
    session = Session()
    # A queued stream is silent until it is scheduled: the stall timeout must outlast the first pair.
    servers = Servers([AttachConfig(url=url, concurrency=concurrency, otlp=address, otlp_grace_s=10.0, timeout_s=600)], session.feed)
    try:
        await servers.connect()
        fin = await servers.run(RunRequest(prompt=prompt, max_new_tokens=tokens, ignore_eos=True))
        deadline = Deadline(20)
        while not all(r.server is not None and r.server.source == "otlp" for r in session.xray.requests(fin.run_id)) and not deadline.passed():
            await asyncio.sleep(0.1)
    finally:
        await servers.aclose()
    return session, fin.run_id


async def test_four_streams_two_sequences_every_request_has_its_span_and_two_queue(traced):
    url, address = traced
    session, run_id = await run_traced(url, address, concurrency=4, tokens=16)
    reqs = session.xray.requests(run_id)
    for r in reqs:  # shown where an assertion fails
        print(r.segment, {k: round(v, 4) for k, v in (r.server.phases if r.server else {}).items()}, r.client_ttft_s, r.client_e2e_s)
    assert len(reqs) == 4
    assert len({r.trace_id for r in reqs}) == 4  # a fresh trace per stream
    for r in reqs:
        assert r.server is not None and r.server.source == "otlp", r.note
        assert r.server.details["span"] == "llm_request"
        assert r.server.trace_id == r.trace_id
        assert r.request_id in r.server.details["server_request_id"]  # our x-request-id is vLLM's request id
        assert r.server.details["completion_tokens"] == 16 == r.tokens
        for name in ("queue", "prefill", "decode", "ttft", "e2e"):
            assert r.server.sources[name] == SPAN_PHASES[name]
        # The server's phases account for its e2e; what is left is its front and tail, small and not negative.
        e2e = r.phase("e2e")
        assert r.phase("front") >= 0 and abs(r.phase("tail")) < TAIL_TOL_S
        assert sum(r.phase(k) for k in ("front", "queue", "prefill", "decode", "tail")) == pytest.approx(e2e, abs=1e-9)
        # The client's clock starts before the server's and ends after it.
        assert r.client_ttft_s >= r.phase("ttft")
        assert r.client_e2e_s >= e2e
        assert r.overhead_ttft_s >= 0 and r.overhead_e2e_s >= 0
    by_queue = sorted(reqs, key=lambda r: r.phase("queue"))
    first, last = by_queue[:2], by_queue[2:]
    assert all(r.phase("queue") < 0.05 for r in first)  # two sequences: scheduled at once
    assert all(r.phase("queue") > 0.5 * min(x.phase("e2e") for x in first) for r in last)  # waited for the first two

    # The wait as the client saw it: the queued pair's TTFT beyond the first pair's.
    def diff(pick) -> float:
        return sum(pick(r) for r in last) / 2 - sum(pick(r) for r in first) / 2

    client_wait = diff(lambda r: r.client_ttft_s)
    queue = diff(lambda r: r.phase("queue"))
    assert client_wait == pytest.approx(queue + diff(lambda r: r.phase("prefill") + r.phase("front")), abs=QUEUE_TOL_S)
    assert queue > 0.5 * client_wait  # most of the wait is the queue
    status = session.xray.status
    assert isinstance(status, OtlpStatus) and status.joined >= 4 and not status.rejected


async def test_spans_of_other_clients_are_counted_not_joined(traced):
    """A request sent around tokentop (no traceparent of ours): its span is another client's."""
    import httpx

    url, address = traced
    session = Session()
    servers = Servers([AttachConfig(url=url, otlp=address)], session.feed)
    try:
        await servers.connect()
        # Not httpx's 5 s: a vLLM started ahead for a later module shares the 2 cores (once over 5 s in a fresh clone).
        async with httpx.AsyncClient(timeout=120) as http:
            r = await http.post(url + "/v1/completions", json={"model": "smollm2", "prompt": "Hello", "max_tokens": 4})
            assert r.status_code == 200
        deadline = Deadline(60)
        # vLLM's start-up spans (Load model, …) come too, retried until a receiver listened.
        while not (session.xray.status and session.xray.status.others_summary.get("names", {}).get("llm_request")) and not deadline.passed():
            await asyncio.sleep(0.2)
    finally:
        await servers.aclose()
    status = session.xray.status
    assert status.others >= 1 and status.joined == 0
    assert status.others_summary["names"].get("llm_request", 0) >= 1
    assert not session.xray.runs  # no request of ours


def test_bench_with_otlp_has_the_server_phases_of_every_request(traced, tmp_path):
    import json
    import subprocess
    import sys

    url, address = traced
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tui_app",
            "bench",
            "--endpoint",
            url,
            "--otlp",
            address,
            "--lengths",
            "16:8",
            "--concurrency",
            "4",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "-o",
            "json",
            "--out",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert f"--otlp-traces-endpoint http://{address}/v1/traces" in out.stderr
    assert "| with a span | queue | prefill | decode |" in out.stdout and "| 4/4 |" in out.stdout
    data = json.loads((tmp_path / "b.json").read_text())
    (row,), (reqs,) = data["results"], data["requests"]
    assert len(reqs) == 4
    for r in reqs:
        x = r["xray"]
        assert x["server_source"] == "otlp" and x["server_sources"]["queue"] == "gen_ai.latency.time_in_queue"
        assert x["client_ttft_s"] == pytest.approx(r["ttft_s"]) and x["client_e2e_s"] == pytest.approx(r["e2e_s"])
        assert x["overhead_ttft_s"] == pytest.approx(r["ttft_s"] - x["server_ttft_s"]) and x["overhead_ttft_s"] >= 0
        assert x["server_completion_tokens"] == 8
    queue = sorted(r["xray"]["server_queue_s"] for r in reqs)
    assert row["server_queue_mean_s"] == pytest.approx(sum(queue) / 4)
    assert row["server_queue_p50_s"] == pytest.approx((queue[1] + queue[2]) / 2)
    assert queue[2] > 0.05  # two sequences: the second pair queued
