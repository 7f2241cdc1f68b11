"""Where a tier's CPU goes: every process's own CPU seconds, summed by what the process is.

pytest's durations say how long a test took, not what burned the cores meanwhile: in the parallel
tier three workers share two cores with the processes their tests start (engines, scripts,
servers, compilers). This samples every process on the machine twice a second and, when ended
(SIGTERM or Ctrl-C), writes each kind's CPU seconds and count beside the machine's own busy time,
so the share it did not see (processes shorter than a look) is in the same file.

    python -m tests.helpers.census OUT.json &   # then the tier; kill -TERM it when the tier ends

A process's CPU is counted from its start; pytest's own processes, alive before the census began,
from the census's first look at them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import defaultdict

import psutil

EVERY_S = 0.5  # a look at every process costs about 2 % of a core at this pace (beside a tier: 21 s of CPU in 1146)


def kind(cmd: list[str], name: str) -> str:
    """What a process is, by its command line: the tier's own kinds first, then the program."""
    line = " ".join(cmd)
    if "sys.stdin.readline" in line:  # execnet's bootstrap, which pytest-xdist's workers run
        return "pytest worker"
    if "spawn_main" in line:  # multiprocessing's spawn: an engine, or a server's client
        return "engine or client (spawned)"
    if "-m" in cmd and "pytest" in cmd:
        return "pytest"
    if "tests.helpers.llama_server" in line:
        return "llama.cpp server"
    if "tui_app" in cmd or any(os.path.basename(a) == "tokentop" for a in cmd[:2]):
        words = [a for a in cmd[1:] if not a.startswith("-") and a != "tui_app" and os.path.basename(a) != "tokentop"]
        return "tokentop " + (words[0] if words else "(app)")
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        if "-c" in cmd:
            return "python -c"
        script = next((a for a in cmd[1:] if not a.startswith("-")), "")
        return "python " + os.path.basename(script)[:40]
    return name


class Census:
    def __init__(self) -> None:
        self.seen: dict[tuple[int, float], dict] = {}
        self.busy0 = self._busy()
        self.t0, self.began = time.monotonic(), time.time()

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system

    def look(self) -> None:
        for p in psutil.process_iter(["pid", "name", "cmdline", "create_time"]):
            try:
                t = p.cpu_times()
                cpu = t.user + t.system
                key = (p.info["pid"], p.info["create_time"])  # a pid alone can be reused within a tier
                if key not in self.seen:
                    before = key[1] < self.began - 1  # its start is known to a second (boot time's)
                    self.seen[key] = {"kind": kind(p.info["cmdline"] or [], p.info["name"] or ""), "from": cpu if before else 0.0}
                self.seen[key]["cpu"] = cpu
            except psutil.Error:  # ended between the listing and the look
                pass

    def table(self) -> dict:
        by: dict[str, list] = defaultdict(lambda: [0.0, 0])
        for rec in self.seen.values():
            by[rec["kind"]][0] += rec["cpu"] - rec["from"]
            by[rec["kind"]][1] += 1
        rows = sorted(([k, round(s, 1), n] for k, (s, n) in by.items()), key=lambda r: -r[1])
        seen = round(sum(r[1] for r in rows), 1)
        return {"wall_s": round(time.monotonic() - self.t0, 1), "busy_cpu_s": round(self._busy() - self.busy0, 1), "seen_cpu_s": seen, "kinds": rows}


def main(out: str) -> None:
    census = Census()
    ended = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: ended.append(1))
    while not ended:
        census.look()
        time.sleep(EVERY_S)
    with open(out, "w") as f:
        json.dump(census.table(), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
