"""The timing figures against a clock outside the engine: a reader of its events, stamping each as
it arrives, sees the same TTFT, ITL and tok/s as the figures computed from the events."""

import time

import pytest

from monitors.events import Phase, RunStarted, Step
from monitors.timing import RunTimer
from tui_app.requests import Pause, Resume, RunRequest

pytestmark = pytest.mark.serial
READER_S = 0.002  # a reader's own work per token (a UI drawing it): the engine waits for it, and so must its figures


def test_ttft_itl_and_tok_s_are_what_a_reader_of_the_events_sees(plain):
    arrivals: list[tuple[int, object]] = []

    def reader(ev):
        arrivals.append((time.perf_counter_ns(), ev))
        if isinstance(ev, Step):
            time.sleep(READER_S)

    listen, plain.emit = plain.emit, reader
    try:
        called = time.perf_counter_ns()
        fin = plain.run(RunRequest(preset="short", max_new_tokens=24, ignore_eos=True))
    finally:
        plain.emit = listen
    timer = RunTimer()
    for _, ev in arrivals:
        if isinstance(ev, RunStarted):
            timer.started(ev)
        elif isinstance(ev, Step):
            timer.step(ev)
    stats = timer.runs[fin.run_id].total
    started = next(t for t, ev in arrivals if isinstance(ev, RunStarted))
    steps = [(t, ev) for t, ev in arrivals if isinstance(ev, Step)]
    (first, prefill), (last, _) = steps[0], steps[-1]
    assert prefill.kind == "prefill" and all(ev.kind == "decode" for _, ev in steps[1:])
    decode_tokens = sum(ev.n_tokens for _, ev in steps[1:])

    assert stats.ttft_s == pytest.approx((first - started) / 1e9, rel=0.02)
    assert sum(stats.itl_s) == pytest.approx((last - first) / 1e9, rel=0.02)
    assert stats.decode_tps == pytest.approx(decode_tokens / ((last - first) / 1e9), rel=0.02)
    assert stats.e2e_s == pytest.approx((last - called) / 1e9, rel=0.02)  # the reader's wall time from asking
    # one clock: the parts add up to the whole
    assert stats.ttft_s + stats.decode_s == pytest.approx(stats.e2e_s, rel=1e-9)
    # the step's own work stays its own figure, and leaves out the reader's time
    assert stats.decode_s - stats.compute_s >= READER_S * len(steps[1:])


def test_a_pause_is_its_own_phase_not_a_token_interval(plain):
    """Paused 0.3 s after the third step: that step's successor does not count the pause as its
    interval, and end-to-end, TTFT and decode time still add up on the one clock."""
    events = []
    calls = {"n": 0, "paused": None}

    def poll():
        calls["n"] += 1
        if calls["n"] == 4:
            calls["paused"] = time.perf_counter()
            return [Pause()]
        if calls["paused"] is not None and time.perf_counter() - calls["paused"] > 0.3:
            calls["paused"] = None
            return [Resume()]
        return []

    listen, plain.emit = plain.emit, events.append
    try:
        fin = plain.run(RunRequest(preset="short", max_new_tokens=8, ignore_eos=True), poll)
    finally:
        plain.emit = listen
    timer = RunTimer()
    for ev in events:
        if isinstance(ev, RunStarted):
            timer.started(ev)
        elif isinstance(ev, Step):
            timer.step(ev)
        elif isinstance(ev, Phase):
            timer.phase(ev)
    stats = timer.runs[fin.run_id].total
    paused = next(ev.seconds for ev in events if isinstance(ev, Phase) and ev.name == "pause" and ev.done)
    assert paused >= 0.3
    # Each interval less its step's own work (the same step's two figures, so the machine's pace,
    # which moves a step 2-4x here from one second to the next, moves both): the loop's
    # milliseconds, never the pause.
    decode = [ev for ev in events if isinstance(ev, Step) and ev.kind == "decode"]
    assert stats.itl_s == pytest.approx([ev.dt_ns / 1e9 for ev in decode])
    assert max((ev.dt_ns - ev.compute_ns) / 1e9 for ev in decode) < paused / 2
    assert stats.ttft_s + stats.decode_s == pytest.approx(stats.e2e_s, rel=1e-6)
