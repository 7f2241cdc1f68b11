import random

import numpy as np
import pytest

from monitors.leaks import LeakDetector, fit_fan, fit_slope, t_quantile_975

MB = 1024 * 1024


def test_slope_and_standard_error_match_scipy():
    from scipy import stats

    rng = random.Random(1)
    ys = [100 + 0.7 * i + rng.gauss(0, 2) for i in range(40)]
    slope, se = fit_slope(ys)
    ref = stats.linregress(np.arange(40), ys)
    assert slope == pytest.approx(ref.slope, rel=1e-9)
    assert se == pytest.approx(ref.stderr, rel=1e-9)


@pytest.mark.parametrize("df", [1, 2, 5, 10, 29, 30, 31, 48, 100, 500])
def test_t_quantiles_are_within_half_a_percent(df):
    from scipy import stats

    assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=0.005)


@pytest.mark.parametrize("seed", range(20))
def test_a_1_mb_per_run_leak_is_caught_within_20_runs(seed):
    rng = random.Random(seed)
    det = LeakDetector()
    verdicts = [det.add(int((900 + i * 1.0 + rng.gauss(0, 0.5)) * MB)) for i in range(20)]
    assert verdicts[-1].status == "suspected"
    assert verdicts[-1].mb_per_run == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize("seed", range(20))
def test_clean_noisy_runs_with_an_allocator_step_stay_quiet(seed):
    rng = random.Random(seed)
    det = LeakDetector()
    for i in range(200):
        step = 4 if i > 100 else 0  # the allocator grabbing one more arena once
        v = det.add(int((900 + step + rng.gauss(0, 1.0)) * MB))
        if v.status != "collecting":
            assert v.status == "none", (i, v)


def _baselines(engine, runs):
    from tui_app.requests import RunRequest

    det = LeakDetector()
    req = RunRequest(max_new_tokens=2, ignore_eos=True)
    verdicts = []
    for _ in range(runs):
        fin = engine.run(req)
        verdicts.append(det.add(fin.baseline_rss))
    return verdicts


def test_real_model_demo_leak_of_1_mb_per_run_is_caught_within_20_runs(plain):
    # Free 200 MB of heap first: without trimming, the leak would reuse those resident pages and hide.
    junk = [bytearray(b"x" * MB) for _ in range(200)]
    del junk
    plain.cfg.demo_leak_mb = 1.0
    try:
        verdicts = _baselines(plain, 20)
    finally:
        plain.cfg.demo_leak_mb = 0.0
        plain._leak.clear()
    assert verdicts[-1].status == "suspected", verdicts[-1]
    assert 0.5 < verdicts[-1].mb_per_run < 1.5


@pytest.mark.slow
def test_real_model_200_clean_runs_stay_quiet(plain):
    verdicts = _baselines(plain, 200)
    assert [v for v in verdicts if v.status == "suspected"] == []


def test_runs_needed_is_exactly_when_the_first_verdict_comes():
    from monitors.leaks import LeakDetector

    det = LeakDetector()
    verdicts = [det.add(100 * 2**20).status for _ in range(det.runs_needed)]
    assert verdicts[-2] == "collecting" and verdicts[-1] == "none"


def test_the_drawn_fit_is_numpys_least_squares_line_and_its_band_turns_about_the_same_centre():
    rng = random.Random(3)
    det = LeakDetector(warmup=0)
    for i in range(20):
        det.add(int((1200 + 0.8 * i + rng.gauss(0, 0.5)) * 1024 * 1024))
    ys, verdict = list(det.baselines), det.verdict()
    (f0, f1), (l0, l1), (h0, h1) = fit_fan(ys, verdict)
    slope, intercept = np.polyfit(np.arange(len(ys)), ys, 1)
    assert (f0, f1) == pytest.approx((intercept, intercept + slope * (len(ys) - 1)), rel=1e-9)
    assert (l1 - l0, h1 - h0) == pytest.approx(((len(ys) - 1) * verdict.low, (len(ys) - 1) * verdict.high))
    assert (l0 + l1) / 2 == pytest.approx((h0 + h1) / 2) == pytest.approx(np.mean(ys))
