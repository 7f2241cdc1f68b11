"""Process memory readings against the kernel's own accounts: the peak against a known allocation,
RSS against /proc/<pid>/statm and the page-table walk of smaps_rollup."""

import mmap
import os

import pytest

from monitors.events import Step
from monitors.system import PeakRss, ProcessWatcher, rss_bytes

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def touched(n: int) -> mmap.mmap:
    """n bytes of anonymous memory, every page written: n bytes more RSS, given back at close()."""
    m = mmap.mmap(-1, n)
    for i in range(0, n, PAGE):
        m[i] = 1
    return m


def test_the_peak_catches_a_buffer_that_came_and_went_between_reads():
    n = 96 * MB
    peak = PeakRss()
    peak.reset()
    assert peak.exact  # Linux, as CI: the kernel's mark, not a lower bound
    before = rss_bytes()
    touched(n).close()
    assert rss_bytes() < before + n // 4  # gone: no later read of RSS could see it
    assert peak.read() - before == pytest.approx(n, abs=8 * MB)
    peak.reset()  # a new run starts a new mark at the RSS of now
    assert peak.read() < before + n // 4


def statm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def walked_rss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Rss:"))


def test_process_rss_is_the_kernels_count_of_resident_pages():
    m = touched(32 * MB)  # a known share of it, so the check covers more than the interpreter
    try:
        low = statm_rss(os.getpid())
        rss = ProcessWatcher(os.getpid()).sample().rss
        high = statm_rss(os.getpid())
        assert min(low, high) - 64 * PAGE <= rss <= max(low, high) + 64 * PAGE
        assert rss == pytest.approx(walked_rss(os.getpid()), rel=0.01)
    finally:
        m.close()


def test_a_runs_peak_rss_counts_a_buffer_that_lived_inside_the_run(plain):
    """A real run whose reader holds 96 MB while the first token is handed over and frees it: the
    run's peak is at least the RSS read while the buffer was held (the largest of 50 Hz RSS reads
    never saw it), and no more than that or a plain run's peak."""
    from tui_app.requests import RunRequest

    n = 96 * MB
    req = RunRequest(preset="short", max_new_tokens=4, ignore_eos=True)
    plain.run(req)  # warm: the first run's own allocations are not what is measured
    quiet = plain.run(req).peak_rss
    held = []
    listen = plain.emit

    def reader(ev):
        if isinstance(ev, Step) and not held:
            m = touched(n)
            held.append(rss_bytes())
            m.close()
        listen(ev)

    plain.emit = reader
    try:
        loud = plain.run(req).peak_rss
    finally:
        plain.emit = listen
    assert held[0] > rss_bytes() + n // 2  # the buffer was resident, and is gone
    # 2 MB: the kernel counts RSS in per-CPU batches, so its mark and a read of statm differ by some pages
    assert held[0] - 2 * MB <= loud <= max(quiet, held[0]) + 8 * MB
