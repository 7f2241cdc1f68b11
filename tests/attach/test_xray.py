"""Request X-ray: the OTLP/HTTP receiver on a real socket (bodies built with opentelemetry-proto's
own messages, and JSON written as the OTLP specification's example writes it), the join to our
requests, what is said when no span comes, and the real llama.cpp server's per-response timings
on the waterfall."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import httpx
import pytest

from monitors.events import EngineError, OtlpStatus, RequestSent, ServerTiming, Step, from_json, to_json
from monitors.xray import OTHERS, XrayBook
from tests.helpers.otlp import VLLM_ATTRS, protobuf_body
from tui_app.attach import otlp
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.attach.joiner import SpanJoiner
from tui_app.attach.joiner import start as start_otlp
from tui_app.attach.loop import Servers
from tui_app.core.session import Session
from tui_app.requests import RunRequest


def json_value(v) -> dict:
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}


def json_body(trace_id: str, name: str = "llm_request") -> bytes:
    """OTLP/JSON as the specification's example has it: camelCase keys, hex ids, int64 as strings."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
                    "scopeSpans": [
                        {
                            "scope": {"name": "vllm.llm_engine"},
                            "spans": [
                                {
                                    "traceId": trace_id.upper(),
                                    "spanId": "051581bf3cb55c13",
                                    "parentSpanId": "",
                                    "name": name,
                                    "kind": 2,
                                    "startTimeUnixNano": "1700000000000000000",
                                    "endTimeUnixNano": "1700000000812000000",
                                    "attributes": [{"key": k, "value": json_value(v)} for k, v in VLLM_ATTRS.items()],
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    ).encode()


class Collected:
    """A receiver on a free port whose spans are kept, as the client's joiner takes them."""

    def __init__(self, max_body: int = otlp.MAX_BODY):
        self.spans: list = []
        self.receiver = otlp.OtlpReceiver("127.0.0.1", 0, self.spans.extend, max_body=max_body).start()
        self.url = self.receiver.endpoint

    def post(self, body: bytes, kind: str = otlp.PROTOBUF, **headers) -> httpx.Response:
        return httpx.post(self.url, content=body, headers={"Content-Type": kind, **headers}, timeout=5)


@pytest.fixture
def collected():
    c = Collected()
    yield c
    c.receiver.close()


def test_protobuf_and_json_bodies_give_the_same_span(collected):
    trace = "5b8efff798038103d269b633813fc60c"
    for body, kind in ((protobuf_body([(trace, "llm_request", VLLM_ATTRS)]), otlp.PROTOBUF), (json_body(trace), otlp.JSON_TYPE)):
        r = collected.post(body, kind)
        assert r.status_code == 200
        assert r.headers["content-type"] == kind
    a, b = collected.spans
    assert a.trace_id == b.trace_id == trace
    assert a.name == b.name == "llm_request"
    assert a.attributes == b.attributes == VLLM_ATTRS
    assert (a.start_unix_ns, a.end_unix_ns) == (b.start_unix_ns, b.end_unix_ns) == (1_700_000_000_000_000_000, 1_700_000_000_812_000_000)
    assert b.service == "vllm"
    # gzip, as exporters may send it
    r = collected.post(gzip.compress(protobuf_body([(trace, "llm_request", {})])), otlp.PROTOBUF, **{"Content-Encoding": "gzip"})
    assert r.status_code == 200 and len(collected.spans) == 3
    assert collected.receiver.counts() == (3, 3, {})


def test_a_kept_alive_exporter_reaches_the_next_receiver_on_the_port():
    """An exporter posts over one kept-alive connection: when a receiver closes (attach restarted,
    a bench's next command), its next batch must reach the one listening now."""
    first = Collected()
    port = first.receiver.port
    body = protobuf_body([("5b8efff798038103d269b633813fc60c", "llm_request", VLLM_ATTRS)])
    with httpx.Client(headers={"Content-Type": otlp.PROTOBUF}) as exporter:
        assert exporter.post(first.url, content=body).status_code == 200
        first.receiver.close()
        spans: list = []
        second = otlp.OtlpReceiver("127.0.0.1", port, spans.extend).start()
        try:
            assert exporter.post(second.endpoint, content=body).status_code == 200
        finally:
            second.close()
    assert len(first.spans) == 1 and len(spans) == 1


def test_bad_bodies_get_their_status_are_counted_and_the_receiver_goes_on():
    c = Collected(max_body=64 * 1024)
    try:
        trace = "5b8efff798038103d269b633813fc60c"
        cases = [
            (b"\xff\xff\xff\xff", otlp.PROTOBUF, {}, 400),  # not protobuf
            (b"[1, 2]", otlp.JSON_TYPE, {}, 400),  # JSON, not an export
            (b"{not json", otlp.JSON_TYPE, {}, 400),
            (json_body("zz" * 16), otlp.JSON_TYPE, {}, 400),  # an id that is not hex
            (protobuf_body([(trace, "x", {})]), "text/plain", {}, 415),
            (b"\x00" * (64 * 1024 + 1), otlp.PROTOBUF, {}, 413),  # oversize by its length
            (gzip.compress(b"\x00" * (1024 * 1024)), otlp.PROTOBUF, {"Content-Encoding": "gzip"}, 413),  # oversize once unzipped
            (b"not gzip", otlp.PROTOBUF, {"Content-Encoding": "gzip"}, 400),
        ]
        for body, kind, headers, status in cases:
            assert c.post(body, kind, **headers).status_code == status, (body[:20], kind)
        assert httpx.get(c.url, timeout=5).status_code == 405
        assert httpx.post(c.url.replace("/v1/traces", "/v1/metrics"), content=b"", timeout=5).status_code == 404
        assert c.post(protobuf_body([(trace, "llm_request", VLLM_ATTRS)])).status_code == 200
        bodies, spans, rejected = c.receiver.counts()
        assert (bodies, spans) == (1, 1)
        assert rejected == {"malformed": 5, "media type": 1, "oversize": 2, "method": 1, "path": 1}
        assert c.spans[0].attributes == VLLM_ATTRS
    finally:
        c.receiver.close()


def test_a_grpc_exporter_is_told_apart():
    """An OTLP/gRPC exporter opens with HTTP/2's preface: counted as gRPC, and the why names the protocol."""
    c = Collected()
    try:
        with socket.create_connection(("127.0.0.1", c.receiver.port), timeout=5) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            s.settimeout(5)
            assert s.recv(100) == b""  # closed
        assert c.receiver.counts()[2] == {"gRPC": 1}
        joiner = SpanJoiner(c.receiver, [].append)
        assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in joiner.why_none()
    finally:
        c.receiver.close()


def test_port_in_use_is_one_line_with_the_flag(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(otlp.ReceiverError) as err:
            otlp.OtlpReceiver("127.0.0.1", port, print).start()
        assert f"127.0.0.1:{port}" in str(err.value) and "in use" in str(err.value) and "--otlp HOST:PORT" in str(err.value)
        out = subprocess.run(
            [sys.executable, "-m", "tui_app", "attach", "http://127.0.0.1:9", "--otlp", f"127.0.0.1:{port}", "--no-tui", "--no-record"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"tokentop: {err.value}"]


def test_the_address_flag():
    assert otlp.parse_address(None) == ("127.0.0.1", 4318)
    assert otlp.parse_address("4319") == ("127.0.0.1", 4319)
    assert otlp.parse_address("0.0.0.0:4400") == ("0.0.0.0", 4400)
    assert otlp.parse_address("collector.local") == ("collector.local", 4318)
    with pytest.raises(ValueError):
        otlp.parse_address("host:port")


def joined(grace_s: float = 0.2):
    """A receiver and its joiner, the joiner's events into a Session (as the client's loop would)."""
    session = Session()
    spans: list = []
    receiver = otlp.OtlpReceiver("127.0.0.1", 0, spans.append).start()
    joiner = SpanJoiner(receiver, session.feed, grace_s)
    return session, receiver, joiner, spans


def sent(session: Session, run_id: int, segment: int, trace_id: str) -> None:
    session.feed(
        RequestSent(run_id=run_id, segment=segment, trace_id=trace_id, request_id=f"tokentop-{run_id}.{segment}", wall_ns=time.time_ns(), t_ns=1_000_000_000)
    )
    session.feed(
        Step(
            run_id=run_id,
            step=1,
            kind="prefill",
            token_ids=[],
            text="a",
            n_tokens=1,
            t_ns=1_400_000_000,
            dt_ns=400_000_000,
            forward_ns=0,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=0,
            segment=segment,
        )
    )
    session.feed(
        Step(
            run_id=run_id,
            step=2,
            kind="decode",
            token_ids=[],
            text="b",
            n_tokens=1,
            t_ns=1_900_000_000,
            dt_ns=500_000_000,
            forward_ns=0,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=0,
            segment=segment,
        )
    )


def test_a_span_after_no_server_span_was_said_still_joins_and_others_are_summarised():
    session, receiver, joiner, bodies = joined(grace_s=0.05)
    try:
        trace = "0af7651916cd43dd8448eb211c80319c"
        sent(session, 7, 0, trace)
        joiner.expect(trace, 7, 0, "b7ad6b7169203331")
        joiner.ended(trace)
        time.sleep(0.1)
        joiner.tick()
        req = session.xray.get(7, 0)
        assert req.server is None
        assert req.note.startswith("no server span: nothing reached http://127.0.0.1:") and "--otlp-traces-endpoint" in req.note
        # The span comes late (the run is long over): it joins and replaces the note.
        late = protobuf_body([(trace, "llm_request", VLLM_ATTRS)])
        assert httpx.post(receiver.endpoint, content=late, headers={"Content-Type": otlp.PROTOBUF}).status_code == 200
        # Another client's span, and a start-up span: counted, summarised, not joined.
        other = protobuf_body([("1" * 32, "llm_request", VLLM_ATTRS), ("2" * 32, "Load model", {})])
        assert httpx.post(receiver.endpoint, content=other, headers={"Content-Type": otlp.PROTOBUF}).status_code == 200
        for spans in bodies:
            joiner.take(spans)
        joiner.tick()
        assert req.server is not None and req.note == ""
        assert req.phase("queue") == 0.25 and req.phase("e2e") == 0.812
        assert req.phase("front") == pytest.approx(0.31 - 0.25 - 0.04)
        assert req.phase("tail") == pytest.approx(0.812 - 0.31 - 0.5)
        assert req.client_ttft_s == pytest.approx(0.4) and req.overhead_ttft_s == pytest.approx(0.4 - 0.31)
        assert req.overhead_e2e_s == pytest.approx(0.9 - 0.812)
        assert [b[0] for b in req.bars()] == ["front", "queue", "prefill", "decode", "tail", "client"]
        assert req.bars()[-1][1:] == pytest.approx((0.812, 0.9))
        status = session.xray.status
        assert (status.bodies, status.spans, status.joined, status.others) == (2, 3, 1, 2)
        assert status.others_summary["names"] == {"llm_request": 1, "Load model": 1}
        assert status.others_summary["e2e_p50_s"] == pytest.approx((0.812 + 0.812) / 2)
    finally:
        receiver.close()


def test_why_no_span_follows_what_the_receiver_saw():
    _, receiver, joiner, bodies = joined()
    try:
        httpx.post(receiver.endpoint, content=protobuf_body([("3" * 32, "llm_request", VLLM_ATTRS)]), headers={"Content-Type": otlp.PROTOBUF})
        for spans in bodies:
            joiner.take(spans)
        assert "none with this request's trace id" in joiner.why_none() and "traceparent" in joiner.why_none()
        trace = "4" * 32
        joiner.expect(trace, 1, 0, "")
        httpx.post(receiver.endpoint, content=protobuf_body([(trace, "llm_request", VLLM_ATTRS)]), headers={"Content-Type": otlp.PROTOBUF})
        joiner.take(bodies[-1])
        assert "may sample or drop spans" in joiner.why_none()
    finally:
        receiver.close()


def test_a_flood_of_spans_is_counted_in_bounded_memory_and_reaches_the_ui_once_a_second():
    """1,000 spans a second of other clients' traces for 3 s, in batches of 50 as an exporter sends
    them, twice: every one answered and counted; the second round leaves the memory where the
    first did (the others are a ring of OTHERS); the UI is sent one OtlpStatus a tick, not a span."""
    events: list = []
    loop = asyncio.new_event_loop()
    receiver, joiner = start_otlp("127.0.0.1:0", loop, events.append)
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    bodies = [protobuf_body([(f"{k:032x}", "llm_request", VLLM_ATTRS) for k in range(i * 50, i * 50 + 50)]) for i in range(60)]

    def flood() -> float:
        t0 = time.monotonic()
        with httpx.Client(headers={"Content-Type": otlp.PROTOBUF}) as http:
            for i, body in enumerate(bodies):
                delay = t0 + i * 0.05 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                assert http.post(receiver.endpoint, content=body).status_code == 200
        return 3000 / (time.monotonic() - t0)

    try:
        tracemalloc.start()
        rate = flood()
        time.sleep(0.3)
        loop.call_soon_threadsafe(joiner.tick)
        time.sleep(0.2)
        after_one = tracemalloc.get_traced_memory()[0]
        flood()
        time.sleep(0.3)
        loop.call_soon_threadsafe(joiner.tick)
        time.sleep(0.2)
        after_two = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    finally:
        receiver.close()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
    assert rate > 800  # paced at 1,000 a second; a receiver slower than 1.25 ms a span falls behind it
    assert receiver.counts() == (120, 6000, {})
    assert joiner.others == 6000 and len(joiner.recent) == OTHERS
    assert after_two - after_one < 256 * 1024, (after_one, after_two)
    assert [type(e) for e in events] == [OtlpStatus, OtlpStatus]
    assert events[-1].others == 6000


def test_the_new_events_round_trip_through_json():
    evs = [
        RequestSent(
            run_id=3, segment=1, trace_id="0af7651916cd43dd8448eb211c80319c", request_id="tokentop-3.1-0af765191", wall_ns=1_700_000_000_000_000_000, t_ns=5
        ),
        ServerTiming(
            run_id=3,
            segment=1,
            trace_id="0af7651916cd43dd8448eb211c80319c",
            source="otlp",
            phases={"queue": 0.25},
            sources={"queue": "gen_ai.latency.time_in_queue"},
            details={"span": "llm_request"},
            start_unix_ns=17,
        ),
        ServerTiming(run_id=3, segment=2, trace_id="ff" * 16, source="otlp", phases={}, sources={}, note="no server span: nothing reached it"),
        OtlpStatus(address="127.0.0.1:4318", bodies=2, spans=3, joined=1, others=2, rejected={"malformed": 1}, others_summary={"latest": 2}),
    ]
    for ev in evs:
        assert from_json(to_json(ev)) == ev


def test_the_book_keeps_the_last_runs_only():
    book = XrayBook(runs=3)
    for run in range(1, 6):
        book.feed(RequestSent(run_id=run, segment=0, trace_id=f"{run:032x}", request_id=str(run), wall_ns=0, t_ns=0))
    assert book.run_ids() == [3, 4, 5]
    book.feed(ServerTiming(run_id=1, segment=0, trace_id=f"{1:032x}", source="otlp", phases={"e2e": 1.0}, sources={}))  # a run already let go: nothing kept
    assert book.get(1) is None


def test_the_book_lets_old_runs_go_once_their_chunks_pass_its_bound():
    book = XrayBook(runs=64, marks=100)
    for run in range(1, 6):
        for seg in range(2):
            book.feed(RequestSent(run_id=run, segment=seg, trace_id=f"{run:030x}{seg:02x}", request_id="", wall_ns=0, t_ns=0))
        for k in range(60):  # 30 chunks a stream, 60 a run
            book.feed(
                Step(
                    run_id=run,
                    step=k,
                    kind="decode",
                    token_ids=[1],
                    text="a",
                    n_tokens=1,
                    t_ns=k,
                    dt_ns=1,
                    forward_ns=0,
                    kv_bytes=0,
                    kv_alloc_bytes=0,
                    seq_len=k,
                    segment=k % 2,
                )
            )
    # Each new run's first request lets the oldest go until at most 100 marks are held: one run
    # finished (60) and the one being sent.
    assert book.run_ids() == [4, 5] and book.marks == 120 == sum(len(r.marks) for run in (4, 5) for r in book.requests(run))
    book.feed(RequestSent(run_id=6, segment=0, trace_id="ab" * 16, request_id="", wall_ns=0, t_ns=0))
    assert book.run_ids() == [5, 6] and book.marks == 60


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
