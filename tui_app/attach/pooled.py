"""The streams' transport: a completion request sent on a kept connection, and its Server-Sent
Events read as they come.

aiohttp, not httpx, carries the streams: per request it costs a quarter of httpx's CPU (0.33 ms
against 1.21, a stream of one chunk), and eight requests started at once reach the server over
0.48 ms where httpx's spread over 7.3 (benchmarks/serving/stream_client.py; docs/performance.md). That time
is inside every TTFT a client measures, and it is what spread the bench's first burst.
The GETs (models, metrics, Prometheus) stay on httpx: one a second costs nothing worth a change.

A response read to its end lets the connection be kept for the next request; one left unread is
closed, and the next request pays a connect. But a server may close a connection after a stream
without saying so: llama.cpp's (xllamacpp) does after every streamed completion, with no
`Connection: close`, where vLLM's keeps it. A close that has not reached this side yet is missed:
the request goes out on a dead connection and gets no response, or its body cannot be written
(back-to-back streams on one connection to llama.cpp: 3 of 10 did; an open loop at 40 req/s: 1 or
2 in 200). No byte of a response came, so it is sent again, on another connection: up to SENDS
times, since the pool may hand it another that the server has closed (at concurrency 8, eight
streams end near together and each leaves a dead connection in the pool: the peer-agreement test
lost one request of 480 so with one resend).

The events are parsed here, by the format's rules (the WHATWG HTML standard, "Interpreting an event
stream"), from the bytes as they come: no aiohttp client for SSE is kept up, and the rules that
matter to a completion stream are few (`data` lines joined, a blank line ends an event, comments
and other fields skipped, any of CRLF, LF or CR ending a line, split anywhere between reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp

from monitors.events import now_ns
from monitors.phases import Piece
from tui_app.attach.sse import ChunkReader, StreamResult

DRAIN_S = 0.2  # a server that keeps the body open after [DONE] is not waited for longer


class NotAStream(Exception):
    """The answer is not an event stream (its Content-Type is not text/event-stream)."""


class SseDecoder:
    """Bytes in, each complete event's data out."""

    def __init__(self) -> None:
        self.buf = b""
        self.data: list[str] = []
        self.started = False

    def feed(self, chunk: bytes) -> list[str]:
        self.buf += chunk
        if not self.started:
            if len(self.buf) < 3 and b"\xef\xbb\xbf".startswith(self.buf):
                return []  # perhaps a byte-order mark, split
            self.started = True
            self.buf = self.buf.removeprefix(b"\xef\xbb\xbf")
        events: list[str] = []
        while True:
            cr, lf = self.buf.find(b"\r"), self.buf.find(b"\n")
            if cr < 0 and lf < 0:
                return events
            if cr >= 0 and (lf < 0 or cr < lf):
                if cr == len(self.buf) - 1:
                    return events  # a CR last: its LF may be in the next read
                line, self.buf = self.buf[:cr], self.buf[cr + (2 if self.buf[cr + 1 : cr + 2] == b"\n" else 1) :]
            else:
                line, self.buf = self.buf[:lf], self.buf[lf + 1 :]
            self._line(line.decode("utf-8", "replace"), events)

    def end(self) -> list[str]:
        """What the stream's last bytes held: a last line without its end, and an event a blank line
        never closed (kept, where the standard drops it: a server that ends with [DONE] and no
        blank line still said it)."""
        events: list[str] = []
        if self.buf:
            self._line(self.buf.decode("utf-8", "replace"), events)
            self.buf = b""
        self._line("", events)
        return events

    def _line(self, line: str, events: list[str]) -> None:
        if not line:
            if self.data:
                events.append("\n".join(self.data))
                self.data = []
            return
        name, colon, value = line.partition(":")
        if name == "data":
            self.data.append(value[1:] if value.startswith(" ") else value if colon else "")


async def sse_data(resp: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """Each event's data as its last byte comes."""
    if resp.content_type != "text/event-stream":
        raise NotAStream(resp.content_type)
    decoder = SseDecoder()
    async for chunk in resp.content.iter_any():
        for data in decoder.feed(chunk):
            yield data
    for data in decoder.end():
        yield data


async def drained(events: AsyncIterator) -> None:
    """The rest of a body after [DONE] (only its end follows), read so the connection is kept."""

    async def rest() -> None:
        async for _ in events:
            pass

    with contextlib.suppress(asyncio.TimeoutError, aiohttp.ClientError, NotAStream):
        await asyncio.wait_for(rest(), DRAIN_S)


def env_proxy(url: str) -> str | None:
    """The proxy HTTP_PROXY / HTTPS_PROXY name for `url`, unless NO_PROXY leaves it out, as httpx
    reads them for the GETs. Looked up once per server: aiohttp's own `trust_env` looks again at
    every request, and that was 0.75 ms of a request's 1.1 from call to arrival."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


SENDS = 10  # a dead pooled connection is dropped as it fails: a few sends reach a live or new one


@contextlib.asynccontextmanager
async def sse_post(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, proxy: str | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
    """A POST's response, sent again on another connection where the server sent no response at
    all (a pooled connection it had closed). An error once the response has begun is the caller's."""
    async with contextlib.AsyncExitStack() as stack:
        for send in range(SENDS):
            try:
                resp = await stack.enter_async_context(session.post(url, json=body, headers=headers, proxy=proxy))
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError) or send == SENDS - 1:
                    raise  # no connection was made, or none answered: nothing more to send it on
        yield resp


async def token_chunks(r: aiohttp.ClientResponse, out: StreamResult) -> AsyncIterator[Piece]:
    """The pieces of an SSE stream that bring tokens, each of one phase and stamped with its
    chunk's arrival, read into `out`; the stream ends at [DONE], at its end, or at an error (then
    without the text still waiting for a token, but with every token that came)."""
    reader = ChunkReader(out)
    events = sse_data(r)
    async for data in events:
        for piece in reader.read(data, now_ns()):
            yield piece
        if out.error:
            break
        if out.done:
            await drained(events)
            break
    for piece in reader.close(keep_pending=not out.error):
        yield piece
