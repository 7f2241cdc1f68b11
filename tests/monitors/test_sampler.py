import itertools
import os
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.common.deadline import Deadline
from monitors.sampler import Sampler


def test_sampler_readings_against_psutil_and_bounded_history():
    s = Sampler(hz=50, history=5)
    s.watch("engine", os.getpid())
    s.start()
    # Until the first sample has gone: more than 5 taken however slowly (20 in 0.4 s when nothing
    # holds the thread back; a loaded machine's may take a second)
    deadline = Deadline(10)
    while not s.snapshot() and not deadline.passed():
        time.sleep(0.02)
    assert s.snapshot(), f"no sample in {deadline}"
    first = s.snapshot()[0].t_ns
    while s.snapshot()[0].t_ns == first and not deadline.passed():
        time.sleep(0.02)
    s.stop()
    snap = s.snapshot()
    assert len(snap) == 5 and snap[0].t_ns != first  # a ring buffer: more taken, 5 kept
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
    """A child spinning on one core, read by the sampler and by /proc around each of its readings
    (the machine may be busy, so the reference is measured, not assumed to be 100 %). A reading
    between the brackets' /proc reads holds the child's CPU seconds over its own interval: at least
    those between the inner reads, at most those between the outer ones, over at most and at least
    their spans; a clock tick (/proc's grain) either way. A window of the test's own would not do: on
    a loaded machine the child's share moves between a reading and a read a scheduling gap away."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    s = Sampler(hz=2)
    s.watch("engine", child.pid)
    time.sleep(0.3)

    def bracketed():
        before = _cpu_seconds(child.pid), time.monotonic()
        sample = s.sample_once()
        return before, sample, (_cpu_seconds(child.pid), time.monotonic())

    (c0a, t0a), _, (c0b, t0b) = bracketed()
    time.sleep(1.5)
    (c1a, t1a), second, (c1b, t1b) = bracketed()
    reading = second.processes["engine"].cpu_percent
    child.wait()
    s.stop()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    low, high = (c1a - c0b - 2 * tick) / (t1b - t0a) * 100, (c1b - c0a + 2 * tick) / (t1a - t0b) * 100
    assert c1a - c0b > 0.2  # the child did run
    assert low <= reading <= high, (reading, low, high)


def test_a_vanished_process_is_na_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    s = Sampler()
    s.watch("engine", child.pid)
    child.wait()
    p = s.sample_once().processes["engine"]
    assert p.rss is None and "gone" in p.reason
    s.stop()
