"""The fleet at scale: a real Prometheus (Debian's) scraping 200 targets, stand-in vLLM replicas
served by one small HTTP server (tests/helpers/standins.py: 200 real servers cannot run here).

1. Queries per refresh with 2 replicas matched and with all of them: the same number (the target).
2. One refresh (the fixed queries in parallel, and their fold into a row per replica): median and
   slowest of N, against the target of 1 s.
3. The UI's CPU while the real app shows the fleet (--watch, --every 1s, a 160×45 tmux terminal),
   % of one core over the measured seconds, against the target of 5 %; the fleet watcher's own
   process beside it.

    .venv/bin/python benchmarks/serving/fleet_scale.py [--replicas 200] [--refreshes 20] [--seconds 30] [--scrape 5s]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp
from monitors.fleet import Fleet, Selector
from monitors.prometheus import Prometheus
from tests.helpers.prometheus import PrometheusServer, StandIns, group, unavailable
from tests.helpers.standins import vllm_replica

ALL = Selector('{job="many"}')
TWO = Selector('{job="many", instance=~"replica-(0|1)"}')


async def refreshes(url: str, n: int) -> tuple[dict, dict, list[float], int]:
    """(queries of a refresh matching two, the same matching all, each refresh's seconds, rows)."""
    prom = Prometheus(url)
    try:
        counts = []
        for selector in (TWO, ALL):
            fleet = Fleet(prom, selector, window_s=60)
            await fleet.refresh()
            before = dict(prom.requests)
            _, rows, _, _ = await fleet.refresh()
            counts.append({k: v - before.get(k, 0) for k, v in prom.requests.items() if v != before.get(k, 0)})
        seconds = []
        for _ in range(n):
            t0 = time.perf_counter()
            _, rows, _, _ = await fleet.refresh()
            seconds.append(time.perf_counter() - t0)
        return counts[0], counts[1], seconds, len(rows)
    finally:
        await prom.aclose()


def ui_cpu(url: str, replicas: int, seconds: float) -> tuple[float, float]:
    """% of one core of the UI process and of the watcher's, over `seconds` once the rows show."""
    app = TmuxApp("tokentop-fleet-bench", ["attach", "--prometheus", url, "--match", str(ALL), "--watch", "--every", "1s", "--backfill", "5m", "--no-record"])
    try:
        app.wait_for(lambda screen: f"{replicas}/{replicas} up" in screen, timeout=90)
        ui = psutil.Process(app.pid())
        children = ui.children(recursive=True)  # the watcher's process (and multiprocessing's resource tracker)

        def busy(procs) -> float:
            return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

        t0, u0, w0 = time.perf_counter(), busy([ui]), busy(children)
        time.sleep(seconds)
        elapsed = time.perf_counter() - t0
        return 100 * (busy([ui]) - u0) / elapsed, 100 * (busy(children) - w0) / elapsed
    finally:
        app.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=200)
    p.add_argument("--refreshes", type=int, default=20)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--scrape", default="5s", help="Prometheus' scrape interval (production fleets: 15-30 s)")
    args = p.parse_args()
    if unavailable():
        print(f"fleet_scale: {unavailable()}", file=sys.stderr)
        return 2
    standins = StandIns()
    with tempfile.TemporaryDirectory() as tmp:
        prom = PrometheusServer(tmp, interval=args.scrape)
        try:
            for i in range(args.replicas):
                standins.texts[f"/r{i}/metrics"] = vllm_replica(i, running=1 + i % 4, waiting=int(i % 3 == 0))
            prom.set_targets("many", [group("many", standins.address, instance=f"replica-{i}", path=f"/r{i}/metrics") for i in range(args.replicas)])
            prom.wait_up("many", args.replicas, timeout=120)
            time.sleep(2 * float(args.scrape.rstrip("s")))  # two scrapes: rates need them
            two, many, seconds, rows = asyncio.run(refreshes(prom.url, args.refreshes))
            print(f"queries per refresh: {sum(two.values())} matching 2 replicas, {sum(many.values())} matching {rows} ({many}); target: the same")
            print(f"refresh: median {statistics.median(seconds) * 1000:.0f} ms, slowest {max(seconds) * 1000:.0f} ms of {len(seconds)}; target < 1000 ms")
            ui, watcher = ui_cpu(prom.url, args.replicas, args.seconds)
            print(f"UI process {ui:.1f} % of a core, its child processes (the fleet watcher) {watcher:.1f} % over {args.seconds:g} s; target for the UI <= 5 %")
        finally:
            prom.close()
            standins.close()
    ok = sum(two.values()) == sum(many.values()) and max(seconds) < 1.0 and ui <= 5.0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
