"""Can the client keep up with a fast server? A local load generator streams chunks at a set rate
(2,000 a second by default: a GPU server's pace, far beyond anything this machine's servers reach)
to tokentop attached with its full TUI in a 160×45 tmux terminal, and writes down when it sent
each chunk. tokentop's own timestamp of each chunk (its recorded Step.t_ns; both clocks are the
machine's CLOCK_MONOTONIC) minus the send time is how late tokentop saw it: the client must not
be what limits or distorts the measurement. The generator is load, not the thing under test.

    .venv/bin/python benchmarks/serving/chunk_rate.py [--rate 2000] [--chunks 4000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp, runs_finished
from monitors.events import Step
from monitors.record import read_recording
from monitors.timing import percentile

SPIN_NS = 200_000  # a sleep overshoots by 89 µs (p50) to 160 µs (p99) on this VM, measured


def generator(port: int, rate: float, chunks: int, log: str) -> None:
    """An OpenAI-style stream of `chunks` one-token chunks, chunk i sent at start + i/rate."""

    from aiohttp import web

    gap_ns = int(1e9 / rate)

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "gen", "object": "model"}]})

    async def chat(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent = []
        t0 = time.perf_counter_ns()
        for i in range(chunks):
            due = t0 + i * gap_ns
            # Asleep until SPIN_NS before the send, then a spin: a sleep alone overshoots by tens of
            # µs, a spin alone takes a core, and on 2 cores that core is the client's or the UI's.
            if (ahead := due - time.perf_counter_ns() - SPIN_NS) > 0:
                time.sleep(ahead / 1e9)
            while time.perf_counter_ns() < due:
                pass
            data = {"choices": [{"index": 0, "delta": {"content": f"<{i}>"}}], "timings": {"predicted_n": i + 1, "prompt_n": 1}}
            sent.append(time.perf_counter_ns())
            await resp.write(f"data: {json.dumps(data)}\n\n".encode())
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')
        with open(log, "a") as f:
            f.write(json.dumps(sent) + "\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2000.0, help="chunks a second")
    ap.add_argument("--chunks", type=int, default=4000, help="chunks a run")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    log = tempfile.mktemp(suffix=".jsonl", prefix="tokentop-gen-")
    gen = mp.get_context("spawn").Process(target=generator, args=(port, args.rate, args.chunks, log), daemon=True)
    gen.start()
    rec = tempfile.mktemp(suffix=".jsonl", prefix="tokentop-chunks-")
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    app = TmuxApp("tt-chunks", ["attach", url, "--auto", "--max-new-tokens", str(args.chunks), "--record", rec])
    try:
        app.wait_for(lambda s: runs_finished(s) >= 1, timeout=120)
        ui = psutil.Process(app.pid())
        c0, t0 = ui.cpu_times(), time.perf_counter()
        app.wait_for(lambda s: runs_finished(s) >= args.runs + 1, timeout=60 * args.runs, poll=0.5)
        c1, t1 = ui.cpu_times(), time.perf_counter()
    finally:
        app.close()
        gen.terminate()
    ui_cpu = ((c1.user - c0.user) + (c1.system - c0.system)) / (t1 - t0) * 100
    with open(log) as f:
        sent = [json.loads(line) for line in f]
    events = read_recording(rec).events
    os.unlink(rec)
    os.unlink(log)
    lags, rates = [], []
    for run, times in enumerate(sent[1 : args.runs + 1], start=2):  # the first run warms up
        steps = [e for e in events if isinstance(e, Step) and e.run_id == run]
        seen = {int(e.text[1:-1]): e.t_ns for e in steps if e.text.startswith("<")}
        lags += [(seen[i] - times[i]) / 1e6 for i in seen]
        rates.append(len(steps) / ((steps[-1].t_ns - steps[0].t_ns) / 1e9))
    lags.sort()
    print(f"\ngenerator at {args.rate:g} chunks/s, {args.chunks} chunks a run, {args.runs} runs measured, TUI at 160×45, {os.cpu_count()} cores\n")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| chunks tokentop saw / sent | {len(lags)} / {args.runs * args.chunks} | all |")
    print(f"| chunk rate as tokentop timed it (median of runs) | {statistics.median(rates):.0f} /s | {args.rate:g} /s |")
    p50, p99 = percentile(lags, 50, True), percentile(lags, 99, True)
    print(f"| tokentop's timestamp − send time, p50 / p99 / max | {p50:.2f} / {p99:.2f} / {lags[-1]:.2f} ms | ≤ 1 ms |")
    print(f"| UI process CPU, % of one core | {ui_cpu:.1f} | ≤ 10 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
