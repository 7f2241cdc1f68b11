"""Attach against the real llama.cpp server (xllamacpp) on 127.0.0.1: streaming, the server's own
counts and timings as the independent reference, concurrency, recording and replay."""

from __future__ import annotations

import asyncio

import pytest

from monitors.events import EngineError, LeverChanged, LeverRefused, ServerSample, Step
from monitors.record import Recorder, read_recording
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.attach.errors import AttachError, api_base
from tui_app.core import readings
from tui_app.core.session import Session
from tui_app.requests import RunRequest


async def attached(url: str, **options) -> tuple[ServerClient, Session, list]:
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=url, **options), session.feed)
    await client.connect()
    return client, session, events


def test_api_base_adds_the_scheme_and_v1():
    assert api_base("127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert api_base("https://h/x/v1/") == "https://h/x/v1"
    with pytest.raises(AttachError, match="not an http"):
        api_base("ftp://h")


@pytest.mark.serial
async def test_stream_tokens_equal_the_servers_count_and_times_agree_with_its_own(llama_server):
    client, session, events = await attached(llama_server.url)
    try:
        assert session.ready.device == "llama.cpp" and session.ready.model == "smollm2"
        assert session.ready.server["pid"] == llama_server.proc.pid  # found by the port it listens on
        fin = await client.run(RunRequest(prompt="Count from one to one hundred.", max_new_tokens=48, ignore_eos=True))
    finally:
        await client.aclose()
    steps = [e for e in events if isinstance(e, Step)]
    d = fin.server
    # Tokens come from the server's running count, and add up to its own final count.
    assert d["tokens_from"] == "server running count"
    assert fin.n_tokens == d["server_tokens"] == d["predicted_n"] == 48 == sum(s.n_tokens for s in steps)
    assert fin.stop_reason == "max tokens"
    assert fin.prompt_tokens == d["prompt_n"] + d["cached_tokens"] > 0
    st = session.timer.runs[fin.run_id].total
    assert st.prompt_tokens == fin.prompt_tokens
    # TTFT from the client includes the server's prompt pass, plus HTTP on localhost.
    assert st.ttft_s * 1000 >= d["prompt_ms"]
    assert st.ttft_s * 1000 - d["prompt_ms"] < 150, (st.ttft_s, d["prompt_ms"])
    # The server's predicted_ms covers the tokens after the first; so does the client's decode time.
    server_itl = d["predicted_ms"] / (d["predicted_n"] - 1) / 1000
    assert st.decode_tokens == 47
    assert st.itl.mean == pytest.approx(server_itl, rel=0.05)
    assert "".join(s.text for s in steps) == fin.text
    assert fin.diff_note == "reference"


async def test_greedy_reruns_are_compared_with_the_servers_first_answer(llama_server):
    client, _, _ = await attached(llama_server.url)
    try:
        req = RunRequest(prompt="Name three colours.", max_new_tokens=12)
        notes = [(await client.run(req)).diff_note for _ in range(2)]
    finally:
        await client.aclose()
    assert notes == ["reference", "identical"]


@pytest.mark.serial
async def test_concurrency_opens_that_many_streams_and_the_server_counts_them(llama_server):
    client, session, events = await attached(llama_server.url, concurrency=1, metrics_hz=8)
    metrics = asyncio.create_task(client.metrics_loop())
    try:
        client.set_lever("batch", 4)
        fin = await client.run(RunRequest(prompt="Tell me about the sea.", max_new_tokens=40, ignore_eos=True))
        await client.sample()
    finally:
        metrics.cancel()
        await asyncio.gather(metrics, return_exceptions=True)
        await client.aclose()
    assert any(isinstance(e, LeverChanged) and e.value == 4 for e in events)
    rec = session.timer.runs[fin.run_id]
    assert rec.started.levers.batch == 4
    streams = [s for s in rec.segments if s.n_tokens]
    assert len(streams) == 4 and all(s.n_tokens == 40 for s in streams)
    assert fin.n_tokens == 160 == rec.total.n_tokens
    # The run's rate is the sum of its streams' rates.
    assert rec.total.decode_tps == pytest.approx(sum(s.decode_tps for s in streams), rel=0.25)
    running = [e.values.get("running") for e in events if isinstance(e, ServerSample) and e.values.get("running") is not None]
    assert max(running) == 4  # llamacpp:requests_processing saw our four streams at once
    rows = [r for r in session.rows() if r.run_id == fin.run_id]
    assert len(rows) == 5  # the run and one row per stream


async def test_server_owned_levers_are_refused_with_what_to_do(llama_server):
    client, _, events = await attached(llama_server.url)
    await client.aclose()
    levers = (("cache", False), ("compile", True), ("quant", "int8"), ("spec", "lookup"), ("batch", 3), ("think", 64), ("think", -1))
    for name, value in levers:
        client.set_lever(name, value)
    refused = [e for e in events if isinstance(e, LeverRefused)]
    assert [e.lever for e in refused] == ["cache", "compile", "quant", "spec", "batch", "think", "think"]
    assert "restart it with the option" in refused[0].reason and "second server" in refused[0].reason
    assert "1, 2, 4, 8, 16, 32" in refused[-3].reason and "thinking is its own: it takes no budget" in refused[-2].reason
    assert "takes no switch (chat_template_kwargs) on a request" in refused[-1].reason


async def test_an_attach_session_records_and_replays_the_same_rows(llama_server, tmp_path):
    path = tmp_path / "attach.jsonl"
    recorder = Recorder(path)
    session = Session(recorder=recorder)
    client = ServerClient(AttachConfig(url=llama_server.url), session.feed)
    try:
        await client.connect()
        await client.sample()
        fin = await client.run(RunRequest(prompt="Hello there.", max_new_tokens=10))
        await client.sample()
    finally:
        await client.aclose()
        recorder.close()
    rec = read_recording(path)
    assert rec.error is None
    assert any(isinstance(e, ServerSample) and e.values for e in rec.events)
    again = Session.from_events(rec.events)
    live_row, replay_row = session.rows()[-1], again.rows()[-1]
    assert replay_row.run_id == fin.run_id
    assert replay_row.stats.itl.p50 == live_row.stats.itl.p50 and replay_row.stats.ttft_s == live_row.stats.ttft_s
    assert again.ready.server["engine"] == "llama.cpp"


async def test_metrics_figures_come_from_llamacpp_counters(llama_server):
    client, _, events = await attached(llama_server.url)
    try:
        await client.sample()
        await client.run(RunRequest(prompt="One more thing.", max_new_tokens=16, ignore_eos=True))
        for _ in range(3):  # a scrape may time out on a loaded machine (5 s): the client says so and scrapes again
            sample = await client.sample()
            if sample is not None:
                break
    finally:
        await client.aclose()
    assert sample is not None, [e.error for e in events if isinstance(e, ServerSample) and e.error]
    assert sample.sources["running"] == "llamacpp:requests_processing"
    assert sample.sources["gen_tps"] == "llamacpp:tokens_predicted_total"
    assert sample.values["gen_tps"] > 0  # 16 tokens between the two scrapes
    assert not [e for e in events if isinstance(e, EngineError)]


async def test_two_servers_take_turns_and_the_comparison_is_the_rows(llama_server):
    from tests.helpers.llama_server import LlamaServer
    from tui_app.attach.loop import Servers

    other = LlamaServer("--slots", "2")
    session = Session()
    events: list = []
    session.listeners.append(events.append)
    servers = Servers([AttachConfig(url=llama_server.url, label="A"), AttachConfig(url=other.url, label="B")], session.feed)
    try:
        await servers.connect()
        assert list(session.servers) == ["A", "B"] and session.levers.server == "A"
        req = RunRequest(prompt="Say something kind.", max_new_tokens=12, ignore_eos=True)
        for _ in range(2):
            for label in ("A", "B"):
                servers.set_lever("server", label)
                await servers.run(req)
        servers.set_lever("server", "C")
    finally:
        await servers.aclose()
        other.close()
    rows = [r for r in session.rows() if r.segment is None]
    assert [r.run_id for r in rows] == [1, 2, 3, 4]  # one numbering across the servers
    assert [r.stats.levers.label() for r in rows] == ["A c1", "B c1", "A c1", "B c1"]
    a = [r.stats for r in rows if r.stats.levers.server == "A"]
    b = [r.stats for r in rows if r.stats.levers.server == "B"]

    def m(xs):
        return sum(xs) / len(xs)

    ttft = m([s.ttft_s for s in b]) / m([s.ttft_s for s in a])
    itl = m([s.itl.p50 for s in b]) / m([s.itl.p50 for s in a])
    tps = m([s.decode_tps for s in b]) / m([s.decode_tps for s in a])
    assert readings.comparison(session) == [f"B ÷ A: TTFT {ttft:.2f}, ITL p50 {itl:.2f}, tok/s {tps:.2f} (2 ÷ 2 runs)"]
    assert any(isinstance(e, LeverRefused) and e.lever == "server" for e in events)
