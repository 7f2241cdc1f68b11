"""`--otlp [HOST:PORT]`: an OTLP/HTTP trace receiver in the attach client's process, and the join of
the server's spans to our requests by trace id.

Every request the client sends carries a W3C `traceparent` with a fresh trace id (one per stream);
a server started with its OTLP exporter pointed here (vLLM: `--otlp-traces-endpoint
http://HOST:PORT/v1/traces` with `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`) posts a span
per request under that trace id, its own account of where the request spent its time.

The receiver is the standard library's threading HTTP server on a thread of its own, so decoding
a large batch never holds up the event loop that timestamps chunks. Bodies are OTLP/HTTP:
protobuf or JSON (ids in hex, as the OTLP JSON mapping has them), gzip or not, decoded by the
`opentelemetry-proto` messages. What it answers: 200 with an empty export response; 400 for a
body that does not decode; 404 for another path; 411 without a length; 413 over MAX_BODY (before
or after gunzip); 415 for another media type; a gRPC exporter's HTTP/2 preface is counted as
such and the connection closed. Every rejection is counted by reason.

Spans whose trace id is one of ours become ServerTiming events on the client's event loop (a span
that comes after its stream ended, even after "no server span" was said, still joins: spans are
batched by the server, vLLM's every 5 s by default); spans of any other trace are counted and the
latest OTHERS kept for a summary, never sent one by one to the UI, so a flood of spans costs the UI
one OtlpStatus a second at most.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import socket
import threading
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/v1/traces"
DEFAULT_PORT = 4318  # OTLP/HTTP's registered port
MAX_BODY = 8 * 2**20  # an exporter's batch of 512 spans is a few hundred KB
PENDING = 8192  # trace ids of ours awaiting a span: a bench cell's requests, 32 streams × many runs
GRACE_S = 15.0  # after a stream ends, how long its span may take (vLLM batches spans every 5 s) before "no server span" is said
STATUS_EVERY_S = 1.0
PROTOBUF, JSON_TYPE = "application/x-protobuf", "application/json"


class ReceiverError(Exception):
    """The receiver cannot listen: one line, with the flag that chooses another address."""


class BodyError(Exception):
    def __init__(self, status: int, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_unix_ns: int
    end_unix_ns: int
    attributes: dict
    service: str = ""


def parse_address(text: str | None) -> tuple[str, int]:
    """`--otlp`'s value: PORT, HOST:PORT or HOST (default port 4318); ValueError says what is wrong."""
    text = (text or "").strip()
    if not text:
        return "127.0.0.1", DEFAULT_PORT
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = (text, str(DEFAULT_PORT)) if not text.isdigit() else ("127.0.0.1", text)
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--otlp {text!r}: expected HOST:PORT, e.g. 127.0.0.1:4318")
    return host, int(port)


def _value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    x = getattr(v, kind)
    if kind == "array_value":
        return [_value(e) for e in x.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in x.values}
    if kind == "bytes_value":
        return x.hex()
    return x


def _attributes(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


def _b64_ids(obj) -> None:
    """OTLP/JSON writes trace and span ids in hex; the protobuf JSON mapping reads bytes as base64."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id") and isinstance(value, str):
                try:
                    obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise BodyError(400, "malformed", f"{key} {value[:40]!r} is not hex") from None
            else:
                _b64_ids(value)
    elif isinstance(obj, list):
        for item in obj:
            _b64_ids(item)


def decode(body: bytes, content_type: str) -> list[Span]:
    """The spans of an OTLP/HTTP trace export body; BodyError (status, reason) where it is not one."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    kind = content_type.split(";")[0].strip().lower()
    req = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise BodyError(400, "malformed", f"not an OTLP protobuf export: {exc}") from None
    elif kind == JSON_TYPE:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BodyError(400, "malformed", f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BodyError(400, "malformed", "not a JSON object")
        _b64_ids(data)
        try:
            json_format.ParseDict(data, req, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise BodyError(400, "malformed", f"not an OTLP JSON export: {str(exc)[:200]}") from None
    else:
        raise BodyError(415, "media type", f"Content-Type {kind or 'none'}: OTLP/HTTP is {PROTOBUF} or {JSON_TYPE}")
    spans = []
    for rs in req.resource_spans:
        service = str(_attributes(rs.resource.attributes).get("service.name", ""))
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if len(sp.trace_id) != 16:
                    raise BodyError(400, "malformed", f"span {sp.name!r} has a trace id of {len(sp.trace_id)} bytes, not 16")
                spans.append(
                    Span(
                        sp.trace_id.hex(),
                        sp.span_id.hex(),
                        sp.parent_span_id.hex(),
                        sp.name,
                        sp.start_time_unix_nano,
                        sp.end_time_unix_nano,
                        _attributes(sp.attributes),
                        service,
                    )
                )
    return spans


def _gunzip(body: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BodyError(400, "malformed", f"not gzip: {exc}") from None
    if len(out) > limit:
        raise BodyError(413, "oversize", f"more than {limit} bytes once unzipped")
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: an exporter posts on one connection
    server: _Server

    def log_message(self, format, *args) -> None:
        pass  # counted instead; the client process has no terminal

    def _answer(self, status: int, body: bytes = b"", kind: str = "text/plain", close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _reject(self, status: int, reason: str, detail: str, close: bool = False) -> None:
        self.server.owner.count_rejected(reason)
        self._answer(status, detail.encode()[:500], close=close)

    def do_POST(self) -> None:
        owner = self.server.owner
        if self.path.split("?")[0] != PATH:
            self._reject(404, "path", f"traces are posted to {PATH}")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._reject(411, "no length", "a Content-Length is needed", close=True)
            return
        n = int(length)
        if n > owner.max_body:
            # Not read: the connection closes instead, so an oversize body costs no memory here.
            self._reject(413, "oversize", f"{n} bytes is more than {owner.max_body}", close=True)
            return
        body = self.rfile.read(n)
        kind = self.headers.get("Content-Type", "")
        try:
            if self.headers.get("Content-Encoding", "").strip().lower() == "gzip":
                body = _gunzip(body, owner.max_body)
            spans = decode(body, kind)
        except BodyError as exc:
            self._reject(exc.status, exc.reason, str(exc))
            return
        owner.received(spans)
        json_reply = kind.split(";")[0].strip().lower() == JSON_TYPE
        self._answer(200, b"{}" if json_reply else b"", JSON_TYPE if json_reply else PROTOBUF)

    def parse_request(self) -> bool:
        if self.raw_requestline.startswith(b"PRI * HTTP/2"):
            # HTTP/2 with prior knowledge: an OTLP/gRPC exporter (vLLM's default protocol).
            self.server.owner.count_rejected("gRPC")
            self.close_connection = True
            return False
        return super().parse_request()

    def do_GET(self) -> None:
        self._reject(405, "method", f"POST OTLP traces to {PATH}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: OtlpReceiver

    def __init__(self, *args):
        super().__init__(*args)
        self.connections: set = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request, client_address) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """An exporter keeps its connection open between posts: left open, its next batches would
        go to this closed receiver's handler, never to the next one listening on the port."""
        with self.connections_lock:
            for sock in self.connections:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class OtlpReceiver:
    """The HTTP side: listens on its own thread, decodes, counts, and hands each body's spans to
    `on_spans` on that thread."""

    def __init__(self, host: str, port: int, on_spans: Callable[[list[Span]], None], max_body: int = MAX_BODY):
        self.host, self.port = host, port
        self.on_spans = on_spans
        self.max_body = max_body
        self.lock = threading.Lock()
        self.bodies = 0
        self.spans = 0
        self.rejected: Counter[str] = Counter()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> OtlpReceiver:
        try:
            server = _Server((self.host, self.port), _Handler)
        except OSError as exc:
            what = "the port is in use (another collector or tokentop?)" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise ReceiverError(f"the OTLP receiver cannot listen on {self.host}:{self.port}: {what}; choose another with --otlp HOST:PORT") from None
        server.owner = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}{PATH}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def received(self, spans: list[Span]) -> None:
        with self.lock:
            self.bodies += 1
            self.spans += len(spans)
        if spans:
            self.on_spans(spans)

    def count_rejected(self, reason: str) -> None:
        with self.lock:
            self.rejected[reason] += 1

    def counts(self) -> tuple[int, int, dict]:
        with self.lock:
            return self.bodies, self.spans, dict(self.rejected)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None


def add_otlp_arg(g) -> None:
    g.add_argument(
        "--otlp",
        nargs="?",
        const="",
        default=None,
        metavar="HOST:PORT",
        help="receive the server's spans over OTLP/HTTP here (default 127.0.0.1:4318) and join them to each request: where it queued, its prefill and decode",
    )


def checked_address(args) -> str | None:
    """--otlp's HOST:PORT once a receiver could listen there, the server flags that send spans to
    it said on stderr; None without --otlp. ReceiverError or ValueError: one line, why not."""
    if getattr(args, "otlp", None) is None:
        return None
    import sys

    host, port = parse_address(args.otlp)
    probe = OtlpReceiver(host, port, lambda spans: None).start()
    probe.close()
    print(f"tokentop: OTLP receiver at {probe.endpoint}; {server_flags(probe.endpoint)}", file=sys.stderr)
    return f"{host}:{probe.port}"


def server_flags(endpoint: str) -> str:
    """What to start a server with so that its spans come here."""
    return f"vLLM: --otlp-traces-endpoint {endpoint} with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf in its environment"
