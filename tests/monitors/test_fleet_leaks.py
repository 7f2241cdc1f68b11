"""The fleet's leak sentinel (monitors/fleet_leaks.py): its fit against numpy's, and over the real
Prometheus of the session (tests/helpers/prometheus.py, scraping every second) with the two real
llama.cpp servers and stand-in vLLM replicas (tests/helpers/standins.py) whose resident memory
rises at a set rate: the one whose memory climbs at a flat load is flagged, with the rate it was
made to have; one whose load climbs with it, one that holds steady, and the real servers are not."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import numpy as np
import pytest

from monitors.fleet import Fleet, Selector
from monitors.fleet_leaks import MB, Sentinel, trend
from monitors.prometheus import Prometheus
from tests.helpers.prometheus import StandIns, group
from tests.helpers.standins import dcgm_memory, vllm_replica


def test_the_fit_is_numpys_line_over_the_scrapes_times_and_a_flat_load_is_told_from_a_rising_one():
    rng = random.Random(5)
    times = [1000.0 + 15 * i for i in range(60) if i not in (20, 21, 33)]  # missed scrapes: time, not index
    memory = [(t, (900 + 0.01 * (t - 1000) + rng.gauss(0, 0.3)) * MB) for t in times]
    flat = [(t, 100 + rng.gauss(0, 3)) for t in times]
    found = trend(memory, flat, 900)
    slope = np.polyfit([t for t, _ in memory], [b / MB for _, b in memory], 1)[0]
    assert found.mb_per_h == pytest.approx(slope * 3600, rel=1e-9) and found.low < found.mb_per_h < found.high
    assert found.mb_per_h == pytest.approx(36, abs=3) and found.flagged and found.mark() == f"RSS +{found.mb_per_h:.0f} MB/h, load flat"
    rising = [(t, 100 + 0.05 * (t - 1000)) for t in times]  # the load up by a third over the span
    assert not trend(memory, rising, 900).flagged
    assert not trend(memory, None, 900).flagged  # no load series: nothing to say it is flat against
    assert trend(memory[:7], flat, 900) is None


async def test_the_replica_whose_memory_climbs_at_a_flat_load_is_flagged(prometheus):
    standins = StandIns()
    standins.texts["/leaky"] = vllm_replica(1, rss_mb=900, rss_mb_per_s=2.0)
    standins.texts["/steady"] = vllm_replica(2, rss_mb=900)
    standins.texts["/busier"] = vllm_replica(3, rss_mb=900, rss_mb_per_s=2.0, gen_tps_per_s=20.0)
    # GPU memory where DCGM maps GPUs to pods: the leaky replica's GPU climbs, the steady one's
    # (under the name Prometheus gives the exporter's own label) does not, busier has no GPU series.
    standins.texts["/dcgm"] = dcgm_memory({"leaky-0": (30_000, 2.0), "exported_pod=steady-0": (30_000, 0.0)})
    groups = [group("sentinel", standins.address, instance=name, path=f"/{name}", pod=f"{name}-0") for name in ("leaky", "steady", "busier")]
    groups.append(group("sentinel-dcgm", standins.address, instance="node-a", path="/dcgm"))
    prom = Prometheus(prometheus.url)
    try:
        prometheus.set_targets("sentinel", groups)
        prometheus.wait_up("sentinel", 3)
        prometheus.wait_up("sentinel-dcgm", 1)
        await asyncio.sleep(24)  # a 20 s span of scrapes, and the 5 s rate window before it
        selector = Selector('{job=~"sentinel|llama"}')
        fleet = Fleet(prom, selector, 5.0, sentinel=Sentinel(prom, selector, 5.0, span_s=20, step_s=1, every_s=0))
        _, rows, _, notes = await fleet.refresh()
        by = {r["instance"]: r for r in rows if not r["server"]}
        leaky, leaky_gpu = fleet.sentinel.trends[("sentinel", "leaky")]
        assert leaky.mb_per_h == pytest.approx(2.0 * 3600, rel=0.08), leaky.text()
        assert leaky_gpu.what == "GPU mem" and leaky_gpu.mb_per_h == pytest.approx(2.0 * 3600, rel=0.08), leaky_gpu.text()
        assert (
            [m for m in by["leaky"]["marks"] if "MB/h" in m]
            == [leaky.mark(), leaky_gpu.mark()]
            == [
                f"RSS +{leaky.mb_per_h:.0f} MB/h, load flat",
                f"GPU mem +{leaky_gpu.mb_per_h:.0f} MB/h, load flat",
            ]
        ), (leaky.text(), leaky_gpu.text())  # the load's change and the points fitted, where it fails
        assert [n for n in notes if n.startswith("leak sentinel")] == [
            f"leak sentinel: leaky (sentinel) {leaky.text()} (process_resident_memory_bytes fitted against time, beside generated tokens/s)",
            f"leak sentinel: leaky (sentinel) {leaky_gpu.text()} (DCGM_FI_DEV_FB_USED of its pod's GPUs fitted against time, beside generated tokens/s)",
        ]
        steady_gpu = fleet.sentinel.trends[("sentinel", "steady")][1]
        assert steady_gpu.what == "GPU mem" and abs(steady_gpu.mb_per_h) < 1 and by["steady"]["gpu_memory_trend"].startswith("GPU memory +0.0 MB/h")
        (busier,) = fleet.sentinel.trends[("sentinel", "busier")]  # no GPU of its pod reported
        assert busier.mb_per_h == pytest.approx(2.0 * 3600, rel=0.08) and busier.load_change > 0.5  # its rate from about 300 to 700 tokens/s
        for calm in ("steady", "busier"):
            assert not any("MB/h" in m for m in by[calm]["marks"]), by[calm]
        llama = [r for r in rows if r["job"] == "llama"]
        assert len(llama) == 2 and not any("memory_trend" in r for r in llama)  # llama.cpp exports no process memory
        _, _, _, again = await fleet.refresh()
        assert not any(n.startswith("leak sentinel") for n in again)  # said once

        # What a user runs: the headless fleet, its sentinel over a span of its own (and a rate window
        # within the stand-ins' life: a longer one reads their first minute as a load that climbs).
        cmd = [sys.executable, "-m", "tui_app", "attach", "--prometheus", prometheus.url, "--match", '{job="sentinel"}', "--window", "5s"]
        out = subprocess.run([*cmd, "--leak-span", "20s", "--no-tui", "--once", "--no-record", "-o", "json"], capture_output=True, text=True, timeout=60)
        (obj,) = [json.loads(line) for line in out.stdout.splitlines()]
        marked = {r["instance"]: [m for m in r["marks"] if m.startswith("RSS")] for r in obj["rows"]}
        assert marked["steady"] == marked["busier"] == [] and len(marked["leaky"]) == 1 and marked["leaky"][0].endswith("MB/h, load flat"), obj["rows"]
        off = subprocess.run([*cmd, "--leak-span", "0", "--no-tui", "--once", "--no-record", "-o", "json"], capture_output=True, text=True, timeout=60)
        assert not any("memory_trend" in r for r in json.loads(off.stdout)["rows"])
    finally:
        prometheus.set_targets("sentinel", [])
        await prom.aclose()
        standins.close()
