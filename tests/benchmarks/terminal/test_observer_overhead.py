"""benchmarks/terminal/observer_overhead.py: a step counts in the window its whole interval lies in,
and a quad's ratio is its on windows' pace over its off windows', so a drift across the quad
cancels and a cost of the on windows shows at its size."""

from __future__ import annotations

import pytest

from benchmarks.terminal.observer_overhead import QUAD, Mark, quad_ratios, tps, windows
from monitors.events import Step

MS = 1_000_000


def mark(t_ms: float, on: bool, engine_ms: float = 0.0) -> Mark:
    return Mark(int(t_ms * MS), on, int(engine_ms * MS), 0, 0.0, 0.0)


def step(end_ms: float, dt_ms: float, n: int = 1) -> Step:
    return Step(
        run_id=1,
        step=0,
        kind="decode",
        token_ids=[0] * n,
        text="",
        n_tokens=n,
        t_ns=int(end_ms * MS),
        dt_ns=int(dt_ms * MS),
        forward_ns=0,
        kv_bytes=0,
        kv_alloc_bytes=0,
        seq_len=0,
    )


def test_a_step_counts_only_in_the_window_its_whole_interval_lies_in():
    marks = [mark(0, False, 0), mark(1000, True, 900), mark(2000, False, 1800)]
    steps = [step(t, 100) for t in range(100, 2001, 100)]  # steps end every 100 ms, 100 ms each
    steps.append(step(1050, 100))  # began at 950: across the switch, in neither window
    (quad,) = windows([marks], steps)
    assert [w.on for w in quad] == [False, True]
    assert [w.tokens for w in quad] == [10, 10]  # 100…1000 ms, then 1100…2000 ms
    assert [w.decode_ns for w in quad] == [1000 * MS, 1000 * MS]
    assert [w.engine_ns for w in quad] == [900 * MS, 900 * MS]


def test_a_linear_drift_across_a_quad_cancels_and_a_cost_shows_at_its_size():
    """The pace falls 1 % a window through every quad; on windows cost 5 % more time a token."""
    quads, steps, t = [], [], 0.0
    for k in range(6):
        marks = []
        for i, on in enumerate(QUAD[k % 2]):
            marks.append(mark(t, on))
            dt = 50.0 * (1 + 0.01 * (4 * k + i)) * (1.05 if on else 1.0)
            end = t + 1000
            while t + dt <= end:
                t += dt
                steps.append(step(t, dt))
            t = end
        marks.append(mark(t, True))
        quads.append(marks)
    ratios = quad_ratios(windows(quads, steps), tps)
    assert len(ratios) == 6
    assert ratios == pytest.approx([1 / 1.05] * 6, rel=0.002)  # an off-on-off-on order would read 1 % low
