"""The join of the servers' spans to our requests by trace id, on the client's event loop: the
receiver (otlp.py) hands spans in; a span of one of our trace ids becomes a ServerTiming (even
after "no server span" was said: servers batch their spans); spans of other traces are counted and
the latest OTHERS summarised in the once-a-second OtlpStatus, never sent one by one to the UI."""

from __future__ import annotations

import contextlib
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

from monitors.events import OtlpStatus, ServerTiming
from monitors.timing import percentile
from monitors.xray import OTHERS, from_span
from tui_app.attach.otlp import GRACE_S, PENDING, STATUS_EVERY_S, OtlpReceiver, Span, parse_address, server_flags


@dataclass
class _Pending:
    run_id: int
    segment: int
    span_id: str  # our traceparent's span: the server's request span is its child
    deadline: float | None = None  # monotonic; set when the stream ends
    told: bool = False  # "no server span" was said


class SpanJoiner:
    """The join, on the client's event loop: our trace ids (`expect`), spans in (`take`), and once a
    second (`tick`) the receiver's counts and "no server span" for streams whose span is overdue."""

    def __init__(self, receiver: OtlpReceiver, emit, grace_s: float = GRACE_S):
        self.receiver = receiver
        self.emit = emit
        self.grace_s = grace_s
        self.pending: OrderedDict[str, _Pending] = OrderedDict()
        self.joined = 0
        self.others = 0
        self.recent: deque[tuple[str, float | None, float | None, float | None]] = deque(maxlen=OTHERS)  # (name, e2e, queue, ttft) of others' spans
        self._said: tuple | None = None

    def expect(self, trace_id: str, run_id: int, segment: int, span_id: str) -> None:
        self.pending[trace_id] = _Pending(run_id, segment, span_id)
        while len(self.pending) > PENDING:
            self.pending.popitem(last=False)

    def ended(self, trace_id: str) -> None:
        p = self.pending.get(trace_id)
        if p is not None:
            p.deadline = time.monotonic() + self.grace_s

    def take(self, spans: list[Span]) -> None:
        for sp in spans:
            p = self.pending.get(sp.trace_id)
            if p is None:
                self.others += 1
                attrs = sp.attributes
                phases, _, _ = from_span(sp.name, attrs, sp.start_unix_ns, sp.end_unix_ns)
                self.recent.append((sp.name, phases.get("e2e"), phases.get("queue"), phases.get("ttft")))
                continue
            # The request's own span: one with the gen_ai latencies, else the server's top span
            # (our traceparent's child); others of our trace (its inner spans) add nothing here.
            if not any(k.startswith("gen_ai.latency.") for k in sp.attributes) and sp.parent_span_id != p.span_id:
                continue
            phases, sources, details = from_span(sp.name, sp.attributes, sp.start_unix_ns, sp.end_unix_ns)
            if sp.service:
                details["service"] = sp.service
            self.joined += 1
            del self.pending[sp.trace_id]
            self.emit(
                ServerTiming(
                    run_id=p.run_id,
                    segment=p.segment,
                    trace_id=sp.trace_id,
                    source="otlp",
                    phases=phases,
                    sources=sources,
                    details=details,
                    start_unix_ns=sp.start_unix_ns,
                )
            )

    def why_none(self) -> str:
        bodies, spans, rejected = self.receiver.counts()
        endpoint = self.receiver.endpoint
        if rejected.get("gRPC"):
            return "the server exports over gRPC; the receiver takes OTLP/HTTP: set OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf in its environment"
        if not bodies:
            if rejected:
                reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
                return f"the receiver rejected every body ({reasons}): it takes OTLP/HTTP protobuf or JSON"
            return f"nothing reached {endpoint}: start the server with its traces sent there ({server_flags(endpoint)}), and check it can reach this address"
        if not self.joined:
            return f"{spans} spans arrived, none with this request's trace id: the server, or a proxy before it, may not pass the traceparent header on"
        return f"none within {self.grace_s:g} s of the stream's end, while other requests' spans came: the server may sample or drop spans under load"

    def tick(self) -> None:
        now = time.monotonic()
        why = None
        for trace_id, p in self.pending.items():
            if p.deadline is not None and not p.told and now >= p.deadline:
                why = why or self.why_none()
                p.told = True
                self.emit(
                    ServerTiming(run_id=p.run_id, segment=p.segment, trace_id=trace_id, source="otlp", phases={}, sources={}, note=f"no server span: {why}")
                )
        bodies, spans, rejected = self.receiver.counts()
        said = (bodies, spans, self.joined, self.others, tuple(sorted(rejected.items())))
        if said != self._said:
            self._said = said
            self.emit(
                OtlpStatus(
                    address=self.receiver.address,
                    bodies=bodies,
                    spans=spans,
                    joined=self.joined,
                    others=self.others,
                    rejected=rejected,
                    others_summary=self.summary(),
                )
            )

    def summary(self) -> dict:
        """The latest spans of other clients' traces: how many of each name, and their medians."""
        if not self.recent:
            return {}
        out: dict = {"latest": len(self.recent), "names": dict(Counter(name for name, *_ in self.recent))}
        for k, key in ((1, "e2e_p50_s"), (2, "queue_p50_s"), (3, "ttft_p50_s")):
            xs = [r[k] for r in self.recent if r[k] is not None]
            if xs:
                out[key] = percentile(xs, 50)
        return out

    async def run(self) -> None:
        import asyncio

        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            self.tick()


async def settled(requests: list, joiner: SpanJoiner | None) -> None:
    """Until every one of these requests (monitors.xray.RequestXray) has its span or its "no
    server span": they come batched, after their streams; at most the joiner's grace and 2 s."""
    if joiner is None:
        return
    import asyncio

    end = time.monotonic() + joiner.grace_s + 2
    while time.monotonic() < end and not all((x.server is not None and x.server.source == "otlp") or x.note for x in requests):
        await asyncio.sleep(0.1)


def start(address: str | None, loop, emit, grace_s: float = GRACE_S) -> tuple[OtlpReceiver, SpanJoiner]:
    """A receiver on `address` whose spans are joined on `loop` (ReceiverError where it cannot listen)."""
    host, port = parse_address(address)
    joiner: SpanJoiner

    def on_spans(spans: list[Span]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the client is going away
            loop.call_soon_threadsafe(joiner.take, spans)

    receiver = OtlpReceiver(host, port, on_spans).start()
    joiner = SpanJoiner(receiver, emit, grace_s)
    return receiver, joiner
