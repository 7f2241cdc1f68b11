"""What a flood of spans costs the attach client's process: the OTLP receiver and its joiner taking
RATE spans a second (other clients' traces, in bodies of BATCH as an exporter sends them) for
SECONDS, against the same process idle for as long, rounds alternating. Prints the process's CPU
share in each (100 % = one core), the receiver's decode time per span, and how many events reached
the UI (the joiner sends one OtlpStatus a tick, never a span of another client).

    .venv/bin/python benchmarks/serving/otlp_flood.py [--rate 1000] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.otlp import VLLM_ATTRS, protobuf_body
from tui_app.attach import otlp
from tui_app.attach.joiner import start as start_otlp

BATCH = 50


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=1000, help="spans a second")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    events: list = []
    loop = asyncio.new_event_loop()
    receiver, joiner = start_otlp("127.0.0.1:0", loop, events.append)
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    ticker = asyncio.run_coroutine_threadsafe(joiner.run(), loop)
    n_bodies = int(args.rate * args.seconds / BATCH)
    bodies = [protobuf_body([(f"{k:032x}", "llm_request", VLLM_ATTRS) for k in range(i * BATCH, (i + 1) * BATCH)]) for i in range(n_bodies)]
    t0 = time.perf_counter()
    for b in bodies[:20]:
        otlp.decode(b, otlp.PROTOBUF)
    decode_us = (time.perf_counter() - t0) / (20 * BATCH) * 1e6
    me = psutil.Process()
    # The sender is another process's work in real life: its CPU is measured apart (its own thread's times).
    flood, idle = [], []
    try:
        for _ in range(args.rounds):
            for kind in ("flood", "idle"):
                before_events = len(events)
                c0, w0 = me.cpu_times(), time.perf_counter()
                sender_cpu = 0.0
                if kind == "flood":
                    s0 = time.thread_time()
                    with httpx.Client(headers={"Content-Type": otlp.PROTOBUF}) as http:
                        for i, body in enumerate(bodies):
                            delay = w0 + i * BATCH / args.rate - time.perf_counter()
                            if delay > 0:
                                time.sleep(delay)
                            http.post(receiver.endpoint, content=body)
                    sender_cpu = time.thread_time() - s0
                else:
                    time.sleep(args.seconds)
                c1, w1 = me.cpu_times(), time.perf_counter()
                cpu = (c1.user + c1.system - c0.user - c0.system - sender_cpu) / (w1 - w0)
                (flood if kind == "flood" else idle).append((cpu, len(events) - before_events, w1 - w0))
    finally:
        ticker.cancel()
        receiver.close()
        loop.call_soon_threadsafe(loop.stop)
    bodies_in, spans_in, rejected = receiver.counts()
    print(f"receiver: {bodies_in} bodies, {spans_in} spans, rejected {rejected or 'none'}; decode {decode_us:.1f} µs a span ({BATCH} a body)")
    for name, rows in (("flood", flood), ("idle", idle)):
        cpu = sorted(r[0] for r in rows)[len(rows) // 2]
        ev = sum(r[1] for r in rows) / sum(r[2] for r in rows)
        print(f"{name:>5}: receiver process CPU {cpu * 100:.1f} % of a core (median of {len(rows)} rounds); events to the UI {ev:.2f}/s")
    median = {name: sorted(r[0] for r in rows)[len(rows) // 2] for name, rows in (("flood", flood), ("idle", idle))}
    print(f"the flood's cost: {(median['flood'] - median['idle']) * 100:.1f} % of a core at {args.rate} spans/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
