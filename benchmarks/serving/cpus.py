"""Where a serving benchmark's processes run: the server on one CPU and the tools on the others,
as a GPU server's work is not on its load generator's cores, and busy loops as other work on a
shared machine (benchmarks/serving/peer_agreement.py, server_pace.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def split_cpus() -> tuple[set[int], set[int]] | None:
    """The server's CPU and the clients': on a GPU box the server's work is not on the load
    generator's cores; on a small machine sharing them, a client that costs more CPU a chunk slows
    the server it measures (on two shared cores tokentop's figures at concurrency 8 came out 7-10 %
    off the peer's, each tool's own load included). None where there is one CPU to split."""
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[0]}, set(cpus[1:])) if len(cpus) >= 2 else None


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a running process (a new thread takes its creator's CPUs)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def busy_loop(cpus: set[int], bursty: bool = False) -> subprocess.Popen:
    """A process spinning on `cpus` until killed: a client sharing its core gets about half of it.
    `bursty`: 0.3 s busy then 0.2 s idle, over and over, as other work on a shared machine."""
    spin = "\n    t = time.monotonic()\n    while time.monotonic() - t < 0.3: pass\n    time.sleep(0.2)" if bursty else " pass"
    return subprocess.Popen([sys.executable, "-c", f"import os, time\nos.sched_setaffinity(0, {sorted(cpus)})\nwhile True:{spin}"])


def on_cpus(cpus: set[int] | None):
    """A child's preexec_fn that puts it on `cpus`; None (where it goes) for no such limit."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)
