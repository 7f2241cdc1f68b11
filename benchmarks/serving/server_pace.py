"""How far a one-CPU llama.cpp's own pace moves between back-to-back blocks of the same requests,
read from the server's own `timings` (prompt_ms, predicted_per_second) so no client clock is
involved. Blocks alternate A, B, A, B, … and nothing differs between A and B, unless `--scrape`
sets a 4 Hz `/metrics` scraper going in every B block (tokentop's bench scrapes so during a
cell; `vllm bench serve` does not). Printed: each figure's B ÷ A per pair of blocks, and pooled
over five pairs as `tests/system/test_peer_agreement_vllm.py` pools its five rounds. The server is
the agreement benchmark's (benchmarks/serving/peer_agreement.py), on one CPU, this client on another.

    .venv/bin/python benchmarks/serving/server_pace.py [--blocks 40] [--per-block 8] [--scrape]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from benchmarks.serving.cpus import pin, split_cpus
from benchmarks.serving.peer_agreement import AGREEMENT_SERVER

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma"]
POOLED = 5  # pairs, as the agreement test's rounds


def scraper(url: str, on: threading.Event, stop: threading.Event) -> None:
    with httpx.Client() as c:
        while not stop.is_set():
            if on.is_set():
                c.get(url + "/metrics")
            time.sleep(0.25)


def blocks(url: str, n: int, per_block: int, scrape: threading.Event | None) -> list[list[tuple[float, float, float]]]:
    """(prompt ms, decode tok/s, e2e s) of each request, by block; B blocks scraped when asked."""
    out = []
    with httpx.Client(timeout=60) as c:

        def one() -> tuple[float, float, float]:
            t = time.perf_counter()
            body = {"prompt": " ".join(random.choices(WORDS, k=14)), "n_predict": 8, "ignore_eos": True, "cache_prompt": False}
            timings = c.post(url + "/completion", json=body).json()["timings"]
            return timings["prompt_ms"], timings["predicted_per_second"], time.perf_counter() - t

        for _ in range(3):  # the first requests of a fresh server are slower
            one()
        for b in range(n):
            if scrape is not None:
                scrape.set() if b % 2 else scrape.clear()
            out.append([one() for _ in range(per_block)])
    return out


def report(got: list[list[tuple[float, float, float]]], b_name: str) -> str:
    lines = []
    for name, k in (("prompt ms", 0), ("decode tok/s", 1), ("e2e", 2)):
        med = [statistics.median(x[k] for x in block) for block in got]
        pairs = [med[i + 1] / med[i] for i in range(0, len(med) - 1, 2)]
        pooled = []
        for g in range(0, len(got) - 2 * POOLED + 1, 2 * POOLED):
            a = [x[k] for block in got[g : g + 2 * POOLED : 2] for x in block]
            b = [x[k] for block in got[g + 1 : g + 2 * POOLED : 2] for x in block]
            pooled.append(statistics.median(b) / statistics.median(a))
        lines.append(
            f"{name}: block medians {min(med):.4g}–{max(med):.4g}; {b_name} ÷ A a pair {min(pairs):.3f}–{max(pairs):.3f}; "
            f"pooled over {POOLED} pairs: {', '.join(f'{p:.3f}' for p in pooled)}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--per-block", type=int, default=8)
    p.add_argument("--scrape", action="store_true", help="a 4 Hz /metrics scraper in every B block")
    args = p.parse_args()
    from tests.helpers.llama_server import LlamaServer

    server = LlamaServer(*AGREEMENT_SERVER)
    split = split_cpus()
    if split is not None:
        pin(server.proc.pid, split[0])
        os.sched_setaffinity(0, split[1])
    stop, on = threading.Event(), threading.Event()
    if args.scrape:
        threading.Thread(target=scraper, args=(server.url, on, stop), daemon=True).start()
    try:
        got = blocks(server.url, args.blocks, args.per_block, on if args.scrape else None)
    finally:
        stop.set()
        server.close()
    where = f"the server on CPU {sorted(split[0])}, this client on {sorted(split[1])}" if split else "one CPU shared"
    print(f"{args.blocks} blocks of {args.per_block} requests (14 words, 8 out), {where}; B: {'scraped at 4 Hz' if args.scrape else 'the same as A'}")
    print(report(got, "B (scraped)" if args.scrape else "B"))


if __name__ == "__main__":
    main()
