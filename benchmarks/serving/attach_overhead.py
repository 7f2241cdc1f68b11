"""What attaching costs the server it watches, side by side in one run.

1. The server's own decode rate (llama.cpp's `timings.predicted_per_second`, so the client's clock
   plays no part) while tokentop is attached with its full TUI drawing in a 160×45 tmux terminal,
   ÷ the same while a bare streaming client (aiohttp and tokentop's stream decoder, nothing else) asks the same
   requests. Blocks alternate (bare, TUI, bare, TUI, …); the ratio is the median of the pairs'
   ratios, with their range. Target ≥ 0.97.
2. CPU of tokentop's UI process and of its client process with 16 concurrent streams, % of one
   core. Target for the UI ≤ 10 %.

The server is the real llama.cpp server (xllamacpp) on the bundled GGUF, one thread.

    .venv/bin/python benchmarks/serving/attach_overhead.py [--pairs 5] [--runs 4] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp, runs_finished
from monitors.events import RunFinished
from monitors.record import read_recording
from tests.helpers.llama_server import LlamaServer

PROMPT = "Write a short story about a robot who learns to paint."


async def bare(url: str, runs: int, tokens: int) -> list[float]:
    import aiohttp

    from tui_app.attach.pooled import sse_data

    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    rates = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=60)) as client:
        for _ in range(runs):
            async with client.post(url + "/v1/chat/completions", json=body) as r:
                async for data in sse_data(r):
                    if data.startswith("{") and '"timings"' in data and '"usage"' in data:
                        rates.append(json.loads(data)["timings"]["predicted_per_second"])
    return rates


def attached(url: str, runs: int, tokens: int, concurrency: int = 1) -> tuple[list[float], float, float]:
    """(server decode rates, UI CPU %, client CPU %) over `runs` runs after the first."""
    rec = tempfile.mktemp(suffix=".jsonl", prefix="tokentop-attach-")
    app = TmuxApp("tt-attach", ["attach", url, "--auto", "--ignore-eos", "--max-new-tokens", str(tokens), "--record", rec, "--concurrency", str(concurrency)])
    try:
        app.wait_for(lambda s: runs_finished(s) >= 1, timeout=180)
        ui = psutil.Process(app.pid())
        client = next(p for p in ui.children() if "spawn" in " ".join(p.cmdline()))
        procs = (ui, client)
        c0, t0 = [p.cpu_times() for p in procs], time.perf_counter()
        app.wait_for(lambda s: runs_finished(s) >= runs + 1, timeout=60 * runs, poll=0.5)
        c1, t1 = [p.cpu_times() for p in procs], time.perf_counter()
    finally:
        app.close()
    ui_cpu, client_cpu = (((b.user - a.user) + (b.system - a.system)) / (t1 - t0) * 100 for a, b in zip(c0, c1, strict=True))
    events = read_recording(rec).events
    os.unlink(rec)
    rates = [e.server["predicted_per_second"] for e in events if isinstance(e, RunFinished) and e.server and e.run_id > 1]
    return rates[:runs], ui_cpu, client_cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--runs", type=int, default=4, help="runs per block")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    server = LlamaServer("--slots", "16", "--ctx", "16384")
    ratios, cpus = [], []
    try:
        for i in range(args.pairs):
            b = statistics.median(asyncio.run(bare(server.url, args.runs, args.tokens)))
            t, ui_cpu, _ = attached(server.url, args.runs, args.tokens)
            t = statistics.median(t)
            ratios.append(t / b)
            cpus.append(ui_cpu)
            print(
                f"pair {i + 1}: bare client {b:.1f} tok/s, tokentop attached {t:.1f} tok/s (server's own rate), ratio {t / b:.3f}, UI CPU {ui_cpu:.1f} %",
                flush=True,
            )
        _, ui16, client16 = attached(server.url, 2, args.tokens, concurrency=16)
    finally:
        server.close()
    print(
        f"\nllama.cpp server (1 thread) on the default model, {args.tokens} tokens/run, {args.runs} runs a block, {args.pairs} pairs, "
        f"TUI at 160×45, {os.cpu_count()} cores\n"
    )
    print("| measure | value | target |\n|---|---|---|")
    print(
        f"| server decode rate, attached ÷ bare client (median of {len(ratios)} pairs, range) | {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}–{max(ratios):.3f}) | ≥ 0.97 |"
    )
    print(f"| UI process CPU, 1 stream, % of one core (median) | {statistics.median(cpus):.1f} | ≤ 10 |")
    print(f"| UI process CPU, 16 concurrent streams | {ui16:.1f} | ≤ 10 |")
    print(f"| client process CPU, 16 concurrent streams | {client16:.1f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
