"""A stream's connection kept for the next request, and a request sent again where the server had
closed the connection it went out on.

A response read to its end lets httpx keep its connection for the next request; one left unread is
closed, and the next request pays a connect (about 1 ms of CPU a request, which an open loop at a
high rate cannot spare: benchmarks/generator_capacity.py). But a server may close a connection
after a stream without saying so: llama.cpp's (xllamacpp) does after every streamed completion,
with no `Connection: close`, where vLLM's keeps it. httpcore looks for a close before it reuses a
pooled connection, and a close that has not reached this side yet is missed: the request goes out
on a dead connection and gets no response (back-to-back streams on one connection to llama.cpp:
3 of 10 did). No byte of a response came, so it is sent again, once, on a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from httpx_sse import EventSource, SSEError, aconnect_sse

DRAIN_S = 0.2  # a server that keeps the body open after [DONE] is not waited for longer


async def drained(events: AsyncIterator) -> None:
    """The rest of a body after [DONE] (only its end follows), read so the connection is kept."""

    async def rest() -> None:
        async for _ in events:
            pass

    with contextlib.suppress(asyncio.TimeoutError, httpx.HTTPError, SSEError):
        await asyncio.wait_for(rest(), DRAIN_S)


@contextlib.asynccontextmanager
async def sse_post(http: httpx.AsyncClient, url: str, body: dict, headers: dict) -> AsyncIterator[EventSource]:
    """aconnect_sse's POST, sent again on a new connection where the server sent no response at all
    (a pooled connection it had closed). An error once the response has begun is the caller's."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            es = await stack.enter_async_context(aconnect_sse(http, "POST", url, json=body, headers=headers))
        except httpx.RemoteProtocolError:
            es = await stack.enter_async_context(aconnect_sse(http, "POST", url, json=body, headers=headers))
        yield es
