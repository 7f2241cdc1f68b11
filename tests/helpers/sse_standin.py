"""A fast stand-in for an OpenAI-compatible server, for measuring a load generator (a GPU server's
pace cannot run on this machine, and a real server on a CPU is far slower than the generators it
would measure): /v1/completions streams `max_tokens` one-word chunks, --gap-ms apart, then a usage
chunk and [DONE]; /v1/models names one model. It notes when each request arrived (CLOCK_MONOTONIC,
which every process on the host shares), so a generator's send times can be checked from outside
it: GET /arrivals lists them (ns), GET /ttfts each request's arrival to its first chunk's write (ns,
its own TTFT, to check a generator's against), POST /reset forgets both. With --slots N it streams N
requests at a time, the rest waiting in arrival order (a server's queue, at a pace no CPU's moves).

With --reasoning SHAPE, /v1/chat/completions streams a reasoning model's answer as an engine that
does not run here sends it (each shape from its engine's documentation of its chunks): FIRST_S
before the first chunk (the prefill), then THINK thinking chunks and ANSWER answer chunks --gap-ms
apart, a token each, with no running count:
- `ollama`: Ollama's OpenAI-compatible API, the thinking in `delta.reasoning` beside an empty
  `content`, the answer in `delta.content`;
- `deepseek`: DeepSeek's API (deepseek-reasoner), `delta.reasoning_content` then `delta.content`
  (each chunk naming the other field null), and the usage's `completion_tokens_details.reasoning_tokens`;
- `harmony`: gpt-oss behind a server without a Harmony parser, the channels in `content`:
  `<|channel|>analysis<|message|>` … `<|end|>`, then `<|start|>assistant<|channel|>final<|message|>` …,
  each special token a chunk of its own.

With --experts DIR it is an SGLang (or with --recorder lmdeploy, an lmdeploy) with its
expert-distribution recorder on (tests/helpers/expert_recorder.py): /v1/completions' prefill (8
positions) and each later chunk are its forward passes, and the recorder dumps into DIR.

    # prints its URL; serves till stdin ends
    python -m tests.helpers.sse_standin [--port N] [--gap-ms 1] [--slots N] [--reasoning SHAPE] [--experts DIR [--recorder KIND]]

`SseStandIn` starts one in a process of its own, so the generator under test does not share its
interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time

THINK, ANSWER, FIRST_S = 30, 12, 0.2
HARMONY_THINK = ["<|channel|>", "analysis", "<|message|>"], ["<|end|>"]
HARMONY_ANSWER = ["<|start|>", "assistant", "<|channel|>", "final", "<|message|>"]


def reasoning_chunks(shape: str) -> list[tuple[str, dict]]:
    """(phase, delta) of each chunk a shape streams: thinking words, then answer words."""
    think = [f" t{i}" for i in range(THINK)]
    answer = [f" a{i}" for i in range(ANSWER)]
    if shape == "ollama":
        return [("thinking", {"role": "assistant", "content": "", "reasoning": w}) for w in think] + [("answer", {"content": w}) for w in answer]
    if shape == "deepseek":
        thinking = [("thinking", {"content": None, "reasoning_content": w}) for w in think]
        return thinking + [("answer", {"content": w, "reasoning_content": None}) for w in answer]
    opens, closes = HARMONY_THINK
    return [("thinking", {"content": w}) for w in [*opens, *think, *closes]] + [("answer", {"content": w}) for w in [*HARMONY_ANSWER, *answer]]


def app(gap_s: float, shape: str | None = None, experts_dir: str | None = None, server: str = "sglang", slots: int = 0):
    from aiohttp import web

    from tests.helpers.expert_recorder import PROMPT_POSITIONS, Recorder, routes

    recorder = Recorder(experts_dir, server) if experts_dir else None

    arrivals: list[int] = []
    ttfts: list[int] = []  # a request's arrival to its first chunk's write, ns: the server's own TTFT
    slot = asyncio.Semaphore(slots) if slots else None  # asyncio's wakes its waiters first come, first served

    async def completions(request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        arrivals.append(arrived)
        async with slot or contextlib.nullcontext():
            return await stream(request, arrived)

    async def stream(request: web.Request, arrived: int) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        model = body.get("model") or "standin"
        for i in range(n):
            if gap_s:
                await asyncio.sleep(gap_s)
            if recorder:
                recorder.forward(PROMPT_POSITIONS if i == 0 else 1)
            chunk = {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": [{"index": 0, "text": " word", "finish_reason": None}]}
            if i == n - 1:
                chunk["choices"][0]["finish_reason"] = "length"
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if i == 0:
                ttfts.append(time.monotonic_ns() - arrived)
        counts = {"prompt_tokens": PROMPT_POSITIONS, "completion_tokens": n, "total_tokens": PROMPT_POSITIONS + n}
        usage = {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": [], "usage": counts}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await asyncio.sleep(FIRST_S)
        base = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()), "model": "standin"}
        chunks = reasoning_chunks(shape or "")
        for i, (_, delta) in enumerate(chunks):
            if i:
                await asyncio.sleep(gap_s)
            choice = {"index": 0, "delta": delta, "finish_reason": "stop" if i == len(chunks) - 1 else None}
            await resp.write(f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode())
        thought = sum(1 for phase, _ in chunks if phase == "thinking")
        counts = {"prompt_tokens": 8, "completion_tokens": len(chunks), "total_tokens": 8 + len(chunks)}
        if shape == "deepseek":
            counts["completion_tokens_details"] = {"reasoning_tokens": thought}
        await resp.write(f"data: {json.dumps({**base, 'choices': [], 'usage': counts})}\n\ndata: [DONE]\n\n".encode())
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
    a.add_routes([web.post("/v1/completions", completions), web.post("/v1/chat/completions", chat), web.get("/v1/models", models)])
    a.add_routes([web.get("/arrivals", get_arrivals), web.get("/ttfts", get_ttfts), web.post("/reset", reset)])
    if recorder:
        a.add_routes(routes(recorder))
    return a


def main() -> None:
    from aiohttp import web

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--gap-ms", type=float, default=1.0)
    p.add_argument("--slots", type=int, default=0, help="requests streamed at a time (0: all)")
    p.add_argument("--reasoning", choices=("ollama", "deepseek", "harmony"), default=None)
    p.add_argument("--experts", default=None, metavar="DIR")
    p.add_argument("--recorder", choices=("sglang", "lmdeploy", "lmdeploy-off"), default="sglang")
    args = p.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(app(args.gap_ms / 1000, args.reasoning, args.experts, args.recorder, args.slots), access_log=None)
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

    def __init__(self, gap_ms: float = 1.0, reasoning: str | None = None, experts: str | None = None, recorder: str = "sglang", slots: int = 0):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cmd = [sys.executable, "-m", "tests.helpers.sse_standin", "--gap-ms", str(gap_ms), "--slots", str(slots)]
        cmd += ["--reasoning", reasoning] if reasoning else []
        cmd += ["--experts", experts, "--recorder", recorder] if experts else []
        self.proc = subprocess.Popen(cmd, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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
