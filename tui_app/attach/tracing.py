"""Each stream's W3C trace: a fresh trace id and the headers that carry it (`traceparent`,
`x-request-id`), said as RequestSent; the response's own account of the stream as ServerTiming;
and, with --otlp, the joiner told which spans to wait for. A server that rejects the headers is
asked once without them, and from then on they are left off."""

from __future__ import annotations

import os
import time

import httpx

from monitors.events import EngineError, RequestSent, ServerTiming
from monitors.xray import from_timings, from_usage
from tui_app.attach.errors import host_port
from tui_app.attach.sse import StreamResult


class Tracing:
    def __init__(self, emit):
        self.emit = emit
        self.joiner = None  # the OTLP span joiner (Servers starts it with --otlp)
        self.headers = True  # off only where the server rejected them

    def start(self, run_id: int, k: int, t0: int) -> tuple[str, dict]:
        """A fresh W3C trace for one stream: its id and the headers that carry it, said as RequestSent."""
        trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
        request_id = f"tokentop-{run_id}.{k}-{trace_id[:12]}"
        self.emit(RequestSent(run_id=run_id, segment=k, trace_id=trace_id, request_id=request_id, wall_ns=time.time_ns(), t_ns=t0))
        if not self.headers:
            return trace_id, {}
        if self.joiner is not None:
            self.joiner.expect(trace_id, run_id, k, span_id)
        return trace_id, {"traceparent": f"00-{trace_id}-{span_id}-01", "x-request-id": request_id}

    async def rejected(self, http: httpx.AsyncClient, url: str, body: dict, headers: dict) -> bool:
        """Whether a request refused with our trace headers goes through without them (a short one,
        not streamed): if so, they are left off from now on, and the user told."""
        if not self.headers:
            return True
        probe = {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
        try:
            r = await http.post(url, json=probe, headers=dict(headers))
        except httpx.HTTPError:
            return False
        if r.status_code != 200:
            return False
        self.headers = False
        what = f"{host_port(url)} rejects the traceparent and x-request-id headers"
        self.emit(EngineError(message=f"{what}: requests go on without them, so no server span can be joined"))
        return True

    def account(self, run_id: int, k: int, trace_id: str, out: StreamResult) -> None:
        """The response's own account of the stream (llama.cpp's timings, a usage block), and the start
        of its span's grace period."""
        if out.timings:
            phases, sources, details = from_timings(out.timings)
            self.emit(ServerTiming(run_id=run_id, segment=k, trace_id=trace_id, source="timings", phases=phases, sources=sources, details=details))
        elif out.usage:
            self.emit(ServerTiming(run_id=run_id, segment=k, trace_id=trace_id, source="usage", phases={}, sources={}, details=from_usage(out.usage)))
        if self.joiner is not None:
            self.joiner.ended(trace_id)
