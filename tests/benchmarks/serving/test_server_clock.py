"""benchmarks/serving/server_clock.py reads a turn's pace off a real llama.cpp server's /metrics counters:
the seconds a prompt token and a generated token took, as the server's own per-request account
(each response's `timings`) says of the same requests."""

from __future__ import annotations

import httpx
import pytest

from benchmarks.serving import server_clock
from tests.helpers.llama_server import LlamaServer


@pytest.fixture(scope="module")
def server():
    s = LlamaServer("--slots", "1")
    yield s
    s.close()


def test_a_turns_pace_is_the_servers_own_account_of_its_requests(server):
    before = server_clock.read(server.url)
    timings = []
    for words in ("Count from one to ten:", "Name three colours of the rainbow, then three fruits, then three trees:"):
        body = {"prompt": words, "max_tokens": 12, "ignore_eos": True, "cache_prompt": False}
        timings.append(httpx.post(server.url + "/v1/completions", json=body, timeout=120).json()["timings"])
    pace = server_clock.between(before, server_clock.read(server.url))
    assert pace is not None
    prefill = sum(t["prompt_ms"] for t in timings) / sum(t["prompt_n"] for t in timings) / 1000
    decode = sum(t["predicted_ms"] for t in timings) / sum(t["predicted_n"] for t in timings) / 1000
    assert pace.prefill_s == pytest.approx(prefill, rel=0.03)
    assert pace.decode_s == pytest.approx(decode, rel=0.03)


def test_no_pace_where_a_turn_computed_nothing_or_the_server_keeps_no_counters(server):
    now = server_clock.read(server.url)
    assert server_clock.between(now, now) is None
    assert server_clock.between(None, now) is None
    quiet = LlamaServer("--no-metrics")
    try:
        assert server_clock.read(quiet.url) is None
    finally:
        quiet.close()
    assert server_clock.read("http://127.0.0.1:9") is None  # nothing listens
