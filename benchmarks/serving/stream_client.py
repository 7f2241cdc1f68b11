"""What one completion stream costs the HTTP client that carries it: httpx against aiohttp, each
with the same event decoder (tui_app/attach/pooled.py's), against the fast stand-in server
(tests/helpers/sse_standin.py, which notes each request's arrival outside the client).

- CPU a request: `--sequential` streams of one chunk one after the other, on kept connections;
  the process's CPU time ÷ the requests.
- A burst: eight streams started at once on kept connections (the bench's first requests at
  concurrency 8): when the first reaches the server, from the start, and how far apart the eight
  arrive. The median of `--bursts`, the two clients taking turns.

    .venv/bin/python benchmarks/serving/stream_client.py [--sequential 300] [--bursts 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiohttp
import httpx

from tests.helpers.sse_standin import SseStandIn
from tui_app.attach.pooled import SseDecoder, sse_data

BURST = 8


def body(tokens: int) -> dict:
    return {"model": "standin", "prompt": "hello", "max_tokens": tokens, "stream": True}


async def with_httpx(client: httpx.AsyncClient, url: str, tokens: int) -> int:
    events = 0
    decoder = SseDecoder()
    async with client.stream("POST", url, json=body(tokens)) as r:
        async for chunk in r.aiter_bytes():
            events += len(decoder.feed(chunk))
    return events + len(decoder.end())


async def with_aiohttp(session: aiohttp.ClientSession, url: str, tokens: int) -> int:
    async with session.post(url, json=body(tokens)) as r:
        return len([d async for d in sse_data(r)])


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sequential", type=int, default=300)
    p.add_argument("--bursts", type=int, default=15)
    args = p.parse_args()
    standin = SseStandIn(gap_ms=5)
    url = standin.url + "/v1/completions"
    hx = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=None))
    ah = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    clients = {"httpx": (with_httpx, hx), "aiohttp": (with_aiohttp, ah)}
    try:
        for fn, c in clients.values():
            await asyncio.gather(*(fn(c, url, 1) for _ in range(BURST)))  # BURST kept connections each
        cpu: dict[str, float] = {}
        for name, (fn, c) in clients.items():
            t = time.process_time()
            for _ in range(args.sequential):
                assert await fn(c, url, 1) == 3  # the token, the usage chunk, [DONE]
            cpu[name] = (time.process_time() - t) / args.sequential
        bursts: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
        for k in range(args.bursts):
            for name in list(clients)[:: 1 if k % 2 == 0 else -1]:
                fn, c = clients[name]
                standin.reset()
                t0 = time.monotonic_ns()
                await asyncio.gather(*(fn(c, url, 4) for _ in range(BURST)))
                a = sorted(standin.arrivals())
                bursts[name].append(((a[0] - t0) / 1e6, (a[-1] - a[0]) / 1e6))
    finally:
        await hx.aclose()
        await ah.close()
        standin.close()
    print(f"{args.sequential} streams of one chunk, one after the other; {args.bursts} bursts of {BURST} (median)\n")
    print("| client | CPU a request (ms) | a burst's first arrival (ms) | its eight arrive over (ms) |")
    print("|---|---|---|---|")
    for name in clients:
        first = statistics.median(b[0] for b in bursts[name])
        spread = statistics.median(b[1] for b in bursts[name])
        print(f"| {name} | {cpu[name] * 1000:.2f} | {first:.2f} | {spread:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
