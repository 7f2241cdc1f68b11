import itertools
import os
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from monitors.sampler import Sampler


def test_sampler_readings_against_psutil_and_bounded_history():
    s = Sampler(hz=50, history=5)
    s.watch("engine", os.getpid())
    s.start()
    time.sleep(0.4)
    s.stop()
    snap = s.snapshot()
    assert len(snap) == 5  # a ring buffer: 20 samples taken, 5 kept
    last = snap[-1]
    rss = psutil.Process().memory_info().rss
    assert last.processes["engine"].rss == pytest.approx(rss, rel=0.05)
    assert last.processes["app"].threads >= 1
    vm = psutil.virtual_memory()
    assert last.system.mem_total == vm.total
    assert len(last.system.per_core) == psutil.cpu_count()
    assert all(0 <= c <= 100 for c in last.system.per_core)
    ts = [x.t_ns for x in snap]
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(ts)]
    assert min(gaps) > 0.009, gaps  # at least half an interval (10 ms) apart, even after a stall
    assert statistics.median(gaps) < 0.1, gaps  # 50 Hz, give or take this VM's stalls


def _cpu_seconds(pid: int) -> float:
    """utime + stime from /proc, read directly (not through psutil)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_process_cpu_percent_against_an_independent_busy_loop():
    """A child spinning on one core, read by the sampler and by /proc over the same interval
    (the machine may be busy, so the reference is measured, not assumed to be 100 %)."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    s = Sampler(hz=2)
    s.watch("engine", child.pid)
    time.sleep(0.3)
    s.sample_once()
    c0, t0 = _cpu_seconds(child.pid), time.monotonic()
    time.sleep(1.5)
    c1, t1 = _cpu_seconds(child.pid), time.monotonic()
    reading = s.sample_once().processes["engine"].cpu_percent
    child.wait()
    s.stop()
    expected = (c1 - c0) / (t1 - t0) * 100
    assert expected > 20  # the child did run
    assert abs(reading - expected) <= 10, (reading, expected)


def test_a_vanished_process_is_na_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    s = Sampler()
    s.watch("engine", child.pid)
    child.wait()
    p = s.sample_once().processes["engine"]
    assert p.rss is None and "gone" in p.reason
    s.stop()
