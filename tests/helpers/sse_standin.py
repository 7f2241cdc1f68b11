"""A fast stand-in for an OpenAI-compatible server, for measuring a load generator (a GPU server's
pace cannot run on this machine, and a real server on a CPU is far slower than the generators it
would measure): /v1/completions streams `max_tokens` one-word chunks, --gap-ms apart, then a usage
chunk and [DONE]; /v1/models names one model. It notes when each request arrived (CLOCK_MONOTONIC,
which every process on the host shares), so a generator's send times can be checked from outside
it: GET /arrivals lists them (ns), GET /ttfts each request's arrival to its first chunk's write (ns,
its own TTFT, to check a generator's against), POST /reset forgets both.

    python -m tests.helpers.sse_standin [--port N] [--gap-ms 1]   # prints its URL; serves until stdin closes

`SseStandIn` starts one in a process of its own, so the generator under test does not share its
interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time


def app(gap_s: float):
    from aiohttp import web

    arrivals: list[int] = []
    ttfts: list[int] = []  # a request's arrival to its first chunk's write, ns: the server's own TTFT

    async def completions(request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        arrivals.append(arrived)
        body = await request.json()
        n = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        model = body.get("model") or "standin"
        for i in range(n):
            if gap_s:
                await asyncio.sleep(gap_s)
            chunk = {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": [{"index": 0, "text": " word", "finish_reason": None}]}
            if i == n - 1:
                chunk["choices"][0]["finish_reason"] = "length"
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if i == 0:
                ttfts.append(time.monotonic_ns() - arrived)
        counts = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        usage = {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": [], "usage": counts}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "tests"}]})

    async def get_arrivals(request: web.Request) -> web.Response:
        return web.json_response(arrivals)

    async def get_ttfts(request: web.Request) -> web.Response:
        return web.json_response(ttfts)

    async def reset(request: web.Request) -> web.Response:
        arrivals.clear()
        ttfts.clear()
        return web.json_response({"ok": True})

    a = web.Application()
    a.add_routes([web.post("/v1/completions", completions), web.get("/v1/models", models)])
    a.add_routes([web.get("/arrivals", get_arrivals), web.get("/ttfts", get_ttfts), web.post("/reset", reset)])
    return a


def main() -> None:
    from aiohttp import web

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--gap-ms", type=float, default=1.0)
    args = p.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(app(args.gap_ms / 1000), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until our stdin closes
        await runner.cleanup()

    asyncio.run(serve())


class SseStandIn:
    """The stand-in in a process of its own on 127.0.0.1."""

    def __init__(self, gap_ms: float = 1.0):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.sse_standin", "--gap-ms", str(gap_ms)], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError(f"the stand-in did not start (exit {self.proc.wait()})")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def arrivals(self) -> list[int]:
        import httpx

        return httpx.get(self.url + "/arrivals", timeout=10).json()

    def take_ttfts(self) -> list[float]:
        """Its own TTFTs (s) since the last call, forgotten with the arrivals."""
        import httpx

        got = [ns / 1e9 for ns in httpx.get(self.url + "/ttfts", timeout=10).json()]
        self.reset()
        return got

    def reset(self) -> None:
        import httpx

        httpx.post(self.url + "/reset", timeout=10)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main()
