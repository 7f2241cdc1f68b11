"""A wait's deadline that counts the time its waiter was running.

This machine kind's VM is paused and resumed (its kernel log says "crng reseeded due to virtual
machine fork"), and everything in it is paused alike: a wall-clock deadline that passed during a
pause failed the wait on what it saw before the pause, the awaited process given no moment to go on
(CI's red run of ec4aab5, docs/testing.md). Here a gap between two checks counts at most GAP_S, so
a wait looks again after a pause, and a stall of what it waits on is still caught.
"""

from __future__ import annotations

import time

# A tmux capture and a 0.05-s sleep took 0.058 s median, 0.069 at most in 600 beside the parallel
# tier (load 3.3). A slower check counts GAP_S too, so its wait lasts longer than its time, never
# without end: the fleet's quiet wait sleeps 2 s between reads, Prometheus's query may take its
# 5-s timeout.
GAP_S = 2.0


class Deadline:
    """`while True: look; if deadline.passed(): fail; sleep`: it passes at the first check after its
    time ran out, so the wait looks once more after a pause, whatever the pause took."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._left = seconds
        self._last = time.perf_counter()
        self.longest = 0.0  # the longest gap between two checks, said where a wait fails

    def passed(self) -> bool:
        if self._left <= 0:
            return True
        now = time.perf_counter()
        gap = now - self._last
        self.longest = max(self.longest, gap)
        self._left -= min(gap, GAP_S)
        self._last = now
        return False

    def __str__(self) -> str:
        return f"{self.seconds:g} s (the longest gap between two looks {self.longest:.1f} s)"
