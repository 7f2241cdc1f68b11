"""benchmarks/common/deadline.py: a wait's deadline that a paused VM does not use up."""

import pytest

from benchmarks.common import deadline as module
from benchmarks.common.deadline import GAP_S, Deadline


@pytest.fixture
def clock(monkeypatch):
    """The clock the deadline reads, moved by the test: a pause of minutes in no time."""
    now = [1000.0]
    monkeypatch.setattr(module.time, "perf_counter", lambda: now[0])
    return now


def test_a_steady_wait_ends_in_its_time(clock):
    d = Deadline(1.0)
    checks = 0
    while not d.passed():
        clock[0] += 0.1
        checks += 1
    assert checks == 11  # the look after the time ran out, too
    assert d.longest == pytest.approx(0.1)


def test_a_pause_counts_gap_s_so_the_wait_looks_again_then_ends_in_its_time(clock):
    d = Deadline(5.0)
    clock[0] += 600  # the VM paused for ten minutes between two looks
    assert not d.passed()
    clock[0] += 600  # and again: each pause counts GAP_S
    assert not d.passed()
    steps = 0
    while not d.passed():
        clock[0] += 0.1
        steps += 1
    assert steps == pytest.approx((5.0 - 2 * GAP_S) / 0.1 + 1, abs=1)  # and one look after
    assert str(d) == "5 s (the longest gap between two looks 600.0 s)"
