"""Request X-ray: the OTLP/HTTP receiver on a real socket (bodies built with opentelemetry-proto's
own messages, and JSON written as the OTLP specification's example writes it), the join to our
requests, what is said when no span comes (the real servers: test_xray_servers.py)."""

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

from monitors.codec import from_json, to_json
from monitors.events import OtlpStatus, RequestSent, ServerTiming, Step
from monitors.xray import OTHERS, XrayBook
from tests.helpers.otlp import VLLM_ATTRS, protobuf_body
from tui_app.attach import otlp
from tui_app.attach.joiner import SpanJoiner
from tui_app.attach.joiner import start as start_otlp
from tui_app.core.session import Session


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


@pytest.mark.serial
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
