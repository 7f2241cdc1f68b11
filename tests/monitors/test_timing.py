import math
import random

import numpy as np
import pytest

from monitors.events import Levers, Phase, RunFinished, RunStarted, Step
from monitors.timing import RunTimer, Summary, mean, percentile, std


@pytest.mark.parametrize("n", [1, 2, 5, 100, 1001])
def test_percentiles_and_moments_match_numpy(n):
    rng = random.Random(n)
    xs = [rng.lognormvariate(0, 1) for _ in range(n)]
    for q in (0, 50, 90, 95, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    assert mean(xs) == pytest.approx(float(np.mean(xs)), rel=1e-12)
    assert std(xs) == pytest.approx(float(np.std(xs)), rel=1e-9, abs=1e-12)
    s = Summary.of(xs)
    assert (s.min, s.max, s.n) == (min(xs), max(xs), n)


def test_empty_summary_is_nan_not_an_error():
    s = Summary.of([])
    assert s.n == 0 and math.isnan(s.p99) and math.isnan(s.mean)


def _step(run, i, kind, t, dt, n=1, seg=0, prop=0, acc=0, fwd=None, phase="answer"):
    return Step(
        run_id=run,
        step=i,
        kind=kind,
        token_ids=[0] * n,
        text="x",
        n_tokens=n,
        t_ns=t,
        dt_ns=dt,
        forward_ns=dt - 100 if fwd is None else fwd,
        kv_bytes=10,
        kv_alloc_bytes=10,
        seq_len=i,
        segment=seg,
        proposed=prop,
        accepted=acc,
        compute_ns=dt - 50,
        phase=phase,
    )


def test_run_timer_definitions_against_hand_computation():
    """TTFT from RunStarted to the prefill step's emission; each step's interval from the emission
    before it, less the phases between; ITL per token (a k-token verify step gives k × dt/k);
    re-prefill excluded from ITL; compile phase inside a run excluded from end-to-end."""
    ms = 1_000_000
    t0 = 1000 * ms
    timer = RunTimer()
    timer.started(RunStarted(run_id=1, levers=Levers(batch=2), prompt_tokens=10, max_new_tokens=8, prompt_text="p", t_ns=t0))
    timer.step(_step(1, 1, "prefill", t0 + 100 * ms, 100 * ms))
    timer.step(_step(1, 2, "decode", t0 + 150 * ms, 50 * ms))
    timer.step(_step(1, 3, "decode", t0 + 210 * ms, 60 * ms))
    timer.lever_changed(1, 1, Levers(batch=2, spec="lookup"))
    timer.phase(Phase(name="compile", detail="x", done=True, seconds=1.0, t_ns=t0 + 220 * ms))
    timer.step(_step(1, 4, "reprefill", t0 + 1300 * ms, 90 * ms, seg=1))  # 1090 ms since step 3, 1000 of them compiling
    timer.step(_step(1, 5, "verify", t0 + 1360 * ms, 60 * ms, n=3, seg=1, prop=4, acc=2))
    timer.finished(
        RunFinished(
            run_id=1,
            n_tokens=7,
            stop_reason="max tokens",
            text="",
            peak_rss=0,
            baseline_rss=0,
            torch_peak=None,
            gpu_baseline=None,
            perplexity=None,
            first_diff=None,
            diff_note="",
        )
    )
    rec = timer.runs[1]
    tot = rec.total
    assert tot.ttft_s == pytest.approx(0.100)
    assert tot.itl_s == pytest.approx([0.05, 0.06, 0.02, 0.02, 0.02])
    assert tot.n_tokens == 1 + 1 + 1 + 1 + 3
    assert tot.decode_tokens == 5 and tot.decode_s == pytest.approx(0.17)
    assert tot.decode_tps == pytest.approx(2 * 5 / 0.17)  # batch 2: throughput over both sequences
    assert tot.compute_s == pytest.approx(0.17 - 3 * 50e-9) and tot.compute_tps == pytest.approx(2 * 5 / tot.compute_s)
    assert tot.reprefill_s == pytest.approx(0.09)
    assert tot.ttft_s + tot.decode_s + tot.reprefill_s == pytest.approx(tot.e2e_s)  # one clock: the parts make the whole
    assert tot.e2e_s == pytest.approx(1.36 - 1.0)  # the 1 s compile phase is not end-to-end time
    assert tot.e2e_tps == pytest.approx(2 * 7 / 0.36)
    assert tot.prefill_tps == pytest.approx(2 * 10 / 0.1)
    assert tot.accept_rate == pytest.approx(0.5) and tot.mean_accepted_len == pytest.approx(3.0)
    assert tot.overhead_ms_per_step == pytest.approx(100 / 1e6)
    seg0, seg1 = rec.segments
    assert seg0.itl_s == pytest.approx([0.05, 0.06]) and seg1.itl_s == pytest.approx([0.02] * 3)
    assert seg1.levers.spec == "lookup" and seg1.reprefill_s == pytest.approx(0.09)


def test_a_mid_run_batch_switch_weights_each_segment_by_its_own_batch():
    """Segments 3 tokens at batch 1 in 0.3 s, then 4 tokens at batch 2 in 0.2 s: the total is
    (1×3 + 2×4) ÷ 0.5 s, not the starting batch × 7 tokens (which under-reported the run)."""
    ms = 1_000_000
    timer = RunTimer()
    timer.started(RunStarted(run_id=1, levers=Levers(batch=1), prompt_tokens=10, max_new_tokens=8, prompt_text="p", t_ns=0))
    timer.step(_step(1, 1, "prefill", 50 * ms, 50 * ms))
    for i in range(3):
        timer.step(_step(1, 2 + i, "decode", (150 + 100 * i) * ms, 100 * ms))
    timer.lever_changed(1, 1, Levers(batch=2))
    timer.step(_step(1, 5, "reprefill", 400 * ms, 50 * ms, seg=1))
    for i in range(4):
        timer.step(_step(1, 6 + i, "decode", (450 + 50 * i) * ms, 50 * ms, seg=1))
    rec = timer.runs[1]
    seg0, seg1 = rec.segments
    assert seg0.decode_tps == pytest.approx(3 / 0.3) and seg1.decode_tps == pytest.approx(2 * 4 / 0.2)
    assert rec.total.decode_tps == pytest.approx((1 * 3 + 2 * 4) / 0.5)
    assert rec.total.e2e_tps == pytest.approx((1 * 1 + 1 * 3 + 2 * 1 + 2 * 4) / 0.6)


def test_phases_ttfa_each_phases_tokens_and_itl_and_the_thinking_share():
    """Two server streams: one thinks 2 steps then answers, the other thinks then calls a tool then
    answers. TTFA is the run's mean of each stream's first answer step, and a run with no thinking
    has TTFA = TTFT."""
    ms = 1_000_000
    t0 = 5000 * ms
    timer = RunTimer()
    timer.started(RunStarted(run_id=1, levers=Levers(server="s"), prompt_tokens=4, max_new_tokens=9, prompt_text="p", t_ns=t0))
    for seg, plan in enumerate(
        (
            [("prefill", 100, "thinking"), ("decode", 20, "thinking"), ("decode", 30, "answer")],
            [("prefill", 200, "thinking"), ("decode", 10, "tool call"), ("decode", 40, "answer"), ("decode", 50, "answer")],
        )
    ):
        t = t0
        for i, (kind, dt, phase) in enumerate(plan, 1):
            t += dt * ms
            timer.step(_step(1, i, kind, t, dt * ms, seg=seg, phase=phase))
    tot = timer.runs[1].total
    s0, s1 = timer.runs[1].segments
    assert s0.ttfa_s == pytest.approx(0.150) and s1.ttfa_s == pytest.approx(0.250)
    assert tot.ttfa_s == pytest.approx(0.200) and tot.ttft_s == pytest.approx(0.150)
    assert tot.phase_tokens == {"thinking": 3, "tool call": 1, "answer": 3}
    assert tot.thinking_share == pytest.approx(3 / 7)
    assert s1.phase_itl("answer").p50 == pytest.approx(0.045) and s1.phase_itl("tool call").n == 1
    assert s0.phase_itl("thinking").mean == pytest.approx(0.020)
    timer.started(RunStarted(run_id=2, levers=Levers(), prompt_tokens=4, max_new_tokens=2, prompt_text="p", t_ns=t0))
    timer.step(_step(2, 1, "prefill", t0 + 80 * ms, 80 * ms))
    timer.step(_step(2, 2, "decode", t0 + 90 * ms, 10 * ms))
    plain = timer.runs[2].total
    assert plain.ttfa_s == plain.ttft_s and plain.phase_itl("answer").n == 1 and not plain.phase_itl_s  # nothing kept twice
