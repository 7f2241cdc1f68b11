"""Request X-ray on real servers: the real llama.cpp server's per-response timings on the
waterfall, what attach says when a server sends no span, `x` in the attached app, the bench's
per-request X-ray in its JSON and a recorded session's report; and stand-in servers that reject
`traceparent` or fail every request."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from monitors.events import EngineError, RequestSent, ServerTiming
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.attach.loop import Servers
from tui_app.core.session import Session
from tui_app.requests import RunRequest


async def test_llama_cpp_streams_carry_their_own_timings_onto_the_waterfall(llama_server):
    """llama.cpp has no OTLP: each stream's final `timings` is the server's account, its prompt_ms
    the prefill and predicted_ms the decode, placed from the send."""
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=llama_server.url, concurrency=2), session.feed)
    try:
        await client.connect()
        fin = await client.run(RunRequest(prompt="Name three rivers.", max_new_tokens=12, ignore_eos=True))
    finally:
        await client.aclose()
    reqs = session.xray.requests(fin.run_id)
    assert [r.segment for r in reqs] == [0, 1]
    timings = [e for e in events if isinstance(e, ServerTiming)]
    assert len(timings) == 2 and {t.source for t in timings} == {"timings"}
    lead = fin.server  # the lead stream's timings as RunFinished carries them
    r0 = session.xray.get(fin.run_id, 0)
    assert r0.phase("prefill") == pytest.approx(lead["prompt_ms"] / 1000)
    assert r0.phase("decode") == pytest.approx(lead["predicted_ms"] / 1000)
    assert r0.server.sources == {
        "prefill": "timings.prompt_ms",
        "decode": "timings.predicted_ms",
        "ttft": "timings.prompt_ms",
        "e2e": "timings.prompt_ms + predicted_ms",
    }
    for r in reqs:
        assert r.details["completion_tokens"] == 12 == r.tokens
        assert len(r.marks) == r.chunks and r.first_ns == r.marks[0]
        assert r.client_ttft_s >= r.phase("prefill")
        assert r.client_e2e_s >= r.phase("e2e")
        bars = r.bars()
        assert [b[0] for b in bars] == ["prefill", "decode", "client"]
        assert bars[-1][2] == pytest.approx(r.client_e2e_s)
        assert r.trace_id and len(r.trace_id) == 32 and r.request_id.startswith(f"tokentop-{fin.run_id}.{r.segment}-")
        # the client's TTFT for this stream is the runs table's
        assert r.client_ttft_s == pytest.approx(session.timer.runs[fin.run_id].segments[r.segment].ttft_s)


async def test_attach_with_otlp_says_no_server_span_and_why_when_the_server_sends_none(llama_server):
    session = Session()
    servers = Servers([AttachConfig(url=llama_server.url, otlp="127.0.0.1:0", otlp_grace_s=0.3)], session.feed)
    try:
        await servers.connect()
        fin = await servers.run(RunRequest(prompt="Hi", max_new_tokens=4, ignore_eos=True))
        await asyncio.sleep(1.5)
    finally:
        await servers.aclose()
    r = session.xray.get(fin.run_id, 0)
    assert r.server is not None and r.server.source == "timings"  # its own account stays
    assert r.note.startswith("no server span: nothing reached http://127.0.0.1:")


async def test_x_opens_the_waterfall_of_the_last_run_in_the_attached_app(llama_server, tmp_path):
    from monitors.xray import PHASE_COLOURS
    from tests.ui.test_app import APP_SIZE, finished, until
    from tui_app.core.sources import AttachSource
    from tui_app.ui.app import TokentopApp
    from tui_app.ui.widgets.waterfall import Waterfall, bar_cells

    source = AttachSource([AttachConfig(url=llama_server.url, concurrency=2)])
    app = TokentopApp(source, RunRequest(max_new_tokens=16, ignore_eos=True), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=60, what="a run of two streams")
        run_id = app.session.finished_ids[-1]
        await until(pilot, lambda: all(r.server is not None for r in app.session.xray.requests(run_id)), what="both streams' timings")
        await pilot.press("x")
        await pilot.pause(0.3)
        pane = app.screen.query_one(Waterfall)
        assert pane.run_id == run_id
        text = [s.text for s in pane._strips]
        reqs = app.session.xray.requests(run_id)
        bars = [s for s in pane._strips if s.text[:1] in ("▶", " ") and s.text[1:4].strip().isdigit()]
        assert len(bars) == 2
        for strip, req in zip(bars, reqs, strict=True):
            assert strip.text[5:13] == req.trace_id[:8]
            # The colours drawn are the server's phases
            colours = {seg.style.bgcolor.name for seg in strip if seg.style and seg.style.bgcolor}
            assert {PHASE_COLOURS[p] for p in ("prefill", "decode")} <= colours
        cells = bar_cells(reqs[0], 100, reqs[0].client_e2e_s)
        prefill_cols = sum(1 for _, p in cells if p == "prefill")
        assert abs(prefill_cols - 100 * reqs[0].phase("prefill") / reqs[0].client_e2e_s) <= 1
        assert sum(1 for g, _ in cells if g != " ") == len({min(int(t / (reqs[0].client_e2e_s / 100)), 99) for t in reqs[0].mark_offsets()})
        assert any("timings.prompt_ms" in t for t in text) and any(reqs[0].request_id in t for t in text)
        await pilot.press("down")
        assert pane.selected == 1
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not app.screen.query(Waterfall)
        await pilot.press("q")


def test_bench_per_request_json_carries_each_request_s_x_ray(llama_server, tmp_path):
    import statistics

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tui_app",
            "bench",
            "--endpoint",
            llama_server.url,
            "--lengths",
            "16:6",
            "--concurrency",
            "2",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "-o",
            "json",
            "--out",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    (row,), (reqs,) = data["results"], data["requests"]
    assert len({r["xray"]["trace_id"] for r in reqs}) == 4
    for r in reqs:
        x = r["xray"]
        assert x["server_source"] == "timings" and x["server_sources"]["prefill"] == "timings.prompt_ms"
        assert x["request_id"].startswith(f"tokentop-{r['run_id']}.0-")
        assert x["client_ttft_s"] == pytest.approx(r["ttft_s"]) and x["client_e2e_s"] == pytest.approx(r["e2e_s"])
        assert x["overhead_e2e_s"] == pytest.approx(r["e2e_s"] - x["server_prefill_s"] - x["server_decode_s"])
    assert row["server_prefill_mean_s"] == pytest.approx(statistics.mean(r["xray"]["server_prefill_s"] for r in reqs))
    assert row["server_queue_mean_s"] is None  # llama.cpp's timings have no queue figure
    # The report's timeline: a row per request, in send order, its prefill and decode bars the server's.
    from tui_app.commands.report import build

    report = build(str(tmp_path / "b.json"))
    (fig,) = report.figures
    assert fig.name == "timeline"
    ax = fig.fig.axes[0]
    widths = {c.get_label(): sorted(round(p.get_width(), 9) for p in c.patches) for c in ax.containers}
    assert widths["prefill"] == sorted(round(r["xray"]["server_prefill_s"], 9) for r in reqs)
    assert widths["decode"] == sorted(round(r["xray"]["server_decode_s"], 9) for r in reqs)
    assert "4 requests, 0 with a server span" in fig.caption and "placed from the client's send" in fig.caption


async def test_a_recorded_attach_session_reports_its_waterfall(llama_server, tmp_path):
    from monitors.record import Recorder
    from tui_app.commands.report import build

    path = tmp_path / "s.jsonl"
    session = Session(recorder=Recorder(path))
    client = ServerClient(AttachConfig(url=llama_server.url, concurrency=4), session.feed)
    try:
        await client.connect()
        fin = await client.run(RunRequest(prompt="Count to ten.", max_new_tokens=8, ignore_eos=True))
    finally:
        await client.aclose()
        session.recorder.close()
    report = build(str(path))
    fig = next(f for f in report.figures if f.name == "xray")
    ax = fig.fig.axes[0]
    decode = next(c for c in ax.containers if c.get_label() == "decode")
    assert sorted(p.get_width() for p in decode.patches) == pytest.approx(sorted(r.phase("decode") for r in session.xray.requests(fin.run_id)))
    assert f"Run {fin.run_id}: 4 streams" in fig.caption and "timings" in fig.caption


async def test_a_server_that_rejects_traceparent_is_said_once_and_requests_go_on_without_it(unused_tcp_port):
    """No real server rejects the W3C headers; a stand-in (aiohttp) that answers 400 to them checks
    that the client says so once and goes on without them."""
    from aiohttp import web

    seen: list[bool] = []

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request):
        seen.append("traceparent" in request.headers)
        if "traceparent" in request.headers:
            return web.json_response({"error": {"message": "unexpected header traceparent"}}, status=400)
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "message": {"content": "a"}, "finish_reason": "length"}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for text in ("a", "b"):
            await resp.write(f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': text}}]})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    events: list = []
    client = ServerClient(AttachConfig(url=f"http://127.0.0.1:{unused_tcp_port}"), events.append)
    try:
        await client.connect()
        first = await client.run(RunRequest(prompt="hi", max_new_tokens=2))
        second = await client.run(RunRequest(prompt="hi", max_new_tokens=2))
    finally:
        await client.aclose()
        await runner.cleanup()
    assert first.text == second.text == "ab"
    said = [e.message for e in events if isinstance(e, EngineError)]
    assert said == [
        f"127.0.0.1:{unused_tcp_port} rejects the traceparent and x-request-id headers: requests go on without them, so no server span can be joined"
    ]
    assert seen == [True, False, False, False]  # refused, the probe, then both streams without them
    assert len([e for e in events if isinstance(e, RequestSent)]) == 2  # each still has its ids, for the recording


async def test_bench_json_is_written_when_requests_fail(unused_tcp_port, tmp_path):
    """A failed request has no TTFT (NaN in memory): the JSON says null instead of refusing to be written."""
    from aiohttp import web

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def fail(request):
        return web.json_response({"error": {"message": "out of KV cache"}}, status=500)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", f"http://127.0.0.1:{unused_tcp_port}", "--lengths", "8:2", "--repeats", "1"]
        proc = await asyncio.create_subprocess_exec(*cmd, "--warmup", "0", "-o", "json", "--out", str(tmp_path / "b"), stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await runner.cleanup()
    assert proc.returncode == 1, err.decode()
    (req,) = json.loads((tmp_path / "b.json").read_text())["requests"][0]
    assert req["ok"] is False and req["ttft_s"] is None
