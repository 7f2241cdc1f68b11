"""Attach under a bad network: the real llama.cpp server behind the tests' fault proxy
(tests/helpers/proxy.py), which adds latency and jitter, caps the bandwidth, resets, holds a
connection half-open, closes slowly and splits the server's bytes at every boundary. Each fault:
the run says what happened in one line (or nothing, where nothing went wrong), the tokens that
came are kept, the numbers that do not depend on the network do not move, and the next run works."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import pytest

from monitors.events import EngineError
from tests.helpers.llama_server import LlamaServer
from tests.helpers.proxy import FaultProxy, Faults
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.core.session import Session
from tui_app.requests import RunRequest

# serial: a delay's effect on TTFT is held to 0.1 s, and a stall's timeout to the time waited: a
# loaded machine's pace, so these run alone after the rest (the other chaos files run on the workers).
pytestmark = [pytest.mark.chaos, pytest.mark.serial]
REQ = RunRequest(prompt="Name three rivers of Europe.", max_new_tokens=16, ignore_eos=True)


@pytest.fixture
def proxy(llama_server):
    with FaultProxy(("127.0.0.1", llama_server.port)) as p:
        yield p


class Attached:
    """A client of one URL feeding its own session, as the app's and the headless command's are."""

    def __init__(self, url: str, **options):
        self.session = Session()
        self.events: list = []
        self.session.listeners.append(self.events.append)
        self.client = ServerClient(AttachConfig(url=url, **options), self.session.feed)

    async def __aenter__(self) -> Attached:
        await self.client.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.aclose()

    async def run(self, req: RunRequest = REQ):
        n = len(self.events)
        fin = await self.client.run(req)
        row = next(r for r in self.session.rows() if r.run_id == fin.run_id and r.segment is None)
        return fin, row.stats, [e.message for e in self.events[n:] if isinstance(e, EngineError)]


async def test_latency_raises_ttft_by_the_delay_and_nothing_else(llama_server, proxy):
    async with Attached(llama_server.url) as direct, Attached(proxy.url) as slow:
        await direct.run()  # the prompt in the server's cache for both, as in every later run
        proxy.up.latency_s = proxy.down.latency_s = 0.25
        pairs = [(await direct.run(), await slow.run()) for _ in range(4)]  # side by side: load hits both alike
    for (fa, _, ea), (fb, sb, eb) in pairs:
        assert ea == eb == []
        assert (fb.text, fb.n_tokens, fb.server["server_tokens"]) == (fa.text, fa.n_tokens, fa.server["server_tokens"])
        assert sb.ttft_s >= 0.5  # never less than the two delays
    # Pair by pair, each pair's two runs back to back: a slow spell of this machine's (2-4x for
    # seconds) moves the pairs it covers whole, and the median of the pairs' differences is that
    # of the pairs it did not split.
    added = statistics.median(b[1].ttft_s - a[1].ttft_s for a, b in pairs)
    assert added == pytest.approx(0.5, abs=0.1)
    itl_direct = statistics.median(a[1].itl.p50 for a, _ in pairs)
    moved = statistics.median(b[1].itl.p50 - a[1].itl.p50 for a, b in pairs)
    assert abs(moved) <= 0.35 * itl_direct + 0.005  # a constant delay moves no gap


async def test_jitter_and_a_bandwidth_cap_change_timings_only(llama_server, proxy):
    async with Attached(llama_server.url) as direct, Attached(proxy.url) as slow:
        fa, _, _ = await direct.run()
        proxy.down.latency_s, proxy.down.jitter_s = 0.05, 0.04
        fb, _, eb = await slow.run()
        assert eb == [] and (fb.text, fb.n_tokens) == (fa.text, fa.n_tokens)
        proxy.reset()
        proxy.down.rate = 3000  # bytes/s: a 16-token stream of llama.cpp is some 6 KB
        before = proxy.bytes["down"]
        t = time.perf_counter()
        fc, sc, ec = await slow.run()
        took = time.perf_counter() - t
    sent = proxy.bytes["down"] - before
    assert ec == [] and (fc.text, fc.n_tokens, fc.server["server_tokens"]) == (fa.text, fa.n_tokens, fa.server["server_tokens"])
    assert took >= (sent - 3000 * 0.02) / 3000 and sc.e2e_s <= took


async def test_a_reset_mid_stream_is_one_line_keeps_the_tokens_and_the_next_run_works(proxy):
    async with Attached(proxy.url, timeout_s=10) as a:
        proxy.arm([Faults(reset_after=1500)])
        fin, stats, errors = await a.run()
        assert fin.stop_reason == "error" and 0 < stats.n_tokens < REQ.max_new_tokens
        assert errors == [f"127.0.0.1:{proxy.port} closed the connection mid-stream (the server stopped, or the network dropped it)"]
        fin, stats, errors = await a.run()
        assert errors == [] and fin.stop_reason == "max tokens" and stats.n_tokens == REQ.max_new_tokens
        assert [r.run_id for r in a.session.rows()] == [1, 2]


async def test_a_half_open_connection_times_out_with_the_time_waited(proxy):
    async with Attached(proxy.url, timeout_s=1.0) as a:
        proxy.arm([Faults(hold_after=1500)])
        t = time.perf_counter()
        fin, stats, errors = await a.run()
        took = time.perf_counter() - t
        assert fin.stop_reason == "error" and 0 < stats.n_tokens < REQ.max_new_tokens
        assert errors == [f"127.0.0.1:{proxy.port} sent nothing for 1 s: the stream stalled (--timeout sets the limit)"]
        assert 1.0 <= took < 1.0 + 3.0
        proxy.release()
        fin, _, errors = await a.run()
        assert errors == [] and fin.stop_reason == "max tokens"


async def test_a_slow_close_costs_the_run_nothing(llama_server, proxy):
    """llama.cpp closes its connection after each stream; its close reaching the client 3 s late
    costs the run nothing (it ends at [DONE]). The next request on that connection, sent before the
    close has come, gets no answer until it does, and is then sent again on a new one (pooled.py):
    it ends whole, the close's delay later (httpx and aiohttp alike: no client can know sooner)."""
    async with Attached(llama_server.url) as direct, Attached(proxy.url) as slow:
        proxy.faults = Faults(close_delay_s=3.0)
        (fa, sa, _), (fb, sb, eb) = await direct.run(), await slow.run()
        (fc, sc, _), (fd, sd, ed) = await direct.run(), await slow.run()
    assert eb == ed == [] and fb.text == fa.text and fd.text == fc.text
    assert sb.e2e_s < sa.e2e_s + 1.0  # the run ends at [DONE], not when the connection closes
    assert sd.e2e_s < sc.e2e_s + 3.0 + 1.0


async def test_bytes_split_at_every_boundary_give_the_servers_token_counts(llama_server, proxy):
    """A byte per write: every SSE event, its `data:` line, its JSON and the HTTP chunk framing
    around it arrive cut at each of their offsets."""
    req = RunRequest(prompt="Name three rivers of Europe.", max_new_tokens=8, ignore_eos=True)
    async with Attached(llama_server.url) as direct, Attached(proxy.url) as split:
        fa, _, _ = await direct.run(req)
        proxy.down.split, proxy.down.split_gap_s = 1, 0.0005
        fb, sb, eb = await split.run(req)
        proxy.down.split = 7  # and at offsets that line up with nothing
        fc, sc, ec = await split.run(req)
    for fin, stats, errors in ((fb, sb, eb), (fc, sc, ec)):
        assert errors == []
        assert fin.n_tokens == stats.n_tokens == fin.server["server_tokens"] == req.max_new_tokens  # the server's own usage
        assert fin.text == fa.text and fin.server["tokens_from"] == "server running count"


async def test_32_streams_each_stalling_at_a_different_moment():
    """Each stream of a 32-stream run goes half-open after its own number of bytes: the run ends
    one timeout after the last of them, with one line, every stream's tokens kept. A server with a
    slot per stream, so that every stream is generating when its bytes stop, and a short raw
    prompt, so that its gaps are short beside the timeout."""
    req = RunRequest(prompt="The rivers of Europe are", max_new_tokens=8, ignore_eos=True)
    server = LlamaServer("--slots", "32")
    try:
        with FaultProxy(("127.0.0.1", server.port)) as proxy:
            # The runs without faults on a client of their own, patient with a loaded machine's gaps.
            async with (
                Attached(proxy.url, timeout_s=60, concurrency=32, chat=False) as plain,
                Attached(proxy.url, timeout_s=3.0, concurrency=32, chat=False) as a,
            ):
                fin, _, errors = await plain.run(req)
                assert errors == [] and fin.n_tokens == 32 * req.max_new_tokens
                stream = proxy.bytes["down"] / 32
                proxy.arm([Faults(hold_after=int(stream * (0.3 + 0.6 * i / 31))) for i in range(32)])
                t = time.perf_counter()
                fin, _, errors = await a.run(req)
                took = time.perf_counter() - t
                assert fin.stop_reason == "error"
                assert errors == [f"127.0.0.1:{proxy.port} sent nothing for 3 s: the stream stalled (--timeout sets the limit)"]
                assert 3.0 <= took < 30
                tokens = [s.n_tokens for s in a.session.timer.runs[fin.run_id].segments]
                assert len(tokens) == 32 and all(0 < n <= req.max_new_tokens for n in tokens), tokens
                assert fin.n_tokens == sum(tokens) and len(set(tokens)) > 3  # each stopped where its bytes did
                proxy.release()
                fin, _, errors = await plain.run(req)  # the network is back: all 32 run to the end
                assert errors == [] and fin.n_tokens == 32 * req.max_new_tokens
    finally:
        server.close()


def test_the_serving_bench_says_why_a_request_failed_once_and_counts_it(proxy, tmp_path):
    """A reset mid-stream in a bench: the table counts the failure and stderr names its reason, once."""
    proxy.arm([Faults(reset_after=1500), Faults(reset_after=1500)], marker=b"POST /v1/")
    cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", proxy.url, "--lengths", "16:24", "--concurrency", "1", "--requests", "4"]
    done = subprocess.run([*cmd, "--repeats", "1", "--warmup", "0", "-o", "json", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300)
    (reqs,) = json.loads((tmp_path / "b.json").read_text())["requests"]
    assert [r["ok"] for r in reqs] == [False, False, True, True] and done.returncode in (0, 1)
    why = f"tokentop: 127.0.0.1:{proxy.port} closed the connection mid-stream (the server stopped, or the network dropped it)"
    assert done.stderr.splitlines().count(why) == 1, done.stderr


async def test_a_request_that_meets_dead_connections_in_a_row_is_sent_until_one_answers(proxy):
    """Three connections in a row reset before any byte of a response (as a pool's dead ones are):
    the request is sent on a fourth and ends whole, with no error said."""
    async with Attached(proxy.url, timeout_s=10) as a:
        proxy.arm([Faults(reset_after=0)] * 3, marker=b"POST /v1/")
        fin, stats, errors = await a.run()
        assert errors == [] and fin.stop_reason == "max tokens" and stats.n_tokens == REQ.max_new_tokens
