import random

import numpy as np
import pytest

from monitors.leaks import LeakDetector, fit_slope, t_quantile_975

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
    from tui_app.engine.generation import RunRequest

    det = LeakDetector()
    req = RunRequest(max_new_tokens=2, ignore_eos=True)
    verdicts = []
    for _ in range(runs):
        fin = engine.run(req)
        verdicts.append(det.add(fin.baseline_rss))
    return verdicts


def test_real_model_debug_leak_of_1_mb_per_run_is_caught_within_20_runs(plain):
    # Free 200 MB of heap first: without trimming, the leak would reuse those resident pages and hide.
    junk = [bytearray(b"x" * MB) for _ in range(200)]
    del junk
    plain.cfg.debug_leak_mb = 1.0
    try:
        verdicts = _baselines(plain, 20)
    finally:
        plain.cfg.debug_leak_mb = 0.0
        plain._leak.clear()
    assert verdicts[-1].status == "suspected", verdicts[-1]
    assert 0.5 < verdicts[-1].mb_per_run < 1.5


@pytest.mark.slow
def test_real_model_200_clean_runs_stay_quiet(plain):
    verdicts = _baselines(plain, 200)
    assert [v for v in verdicts if v.status == "suspected"] == []


def test_a_preparation_phase_restarts_the_baseline_series():
    from monitors.events import Phase, RunFinished
    from tui_app.core.session import Session

    s = Session()
    for i in range(12):
        s.feed(RunFinished(i, 1, "eos", "", 0, (900 + i) * MB, None, None, None, None, ""))
    assert s.verdict.status == "suspected"
    s.feed(Phase("quantize", "int8", True, 1.0))  # a quantized copy: +100 MB, legitimately
    assert s.verdict is None and s.leak.seen == 0
    for i in range(12):
        s.feed(RunFinished(100 + i, 1, "eos", "", 0, 1100 * MB, None, None, None, None, ""))
    assert s.verdict.status == "none"


def test_runs_needed_is_exactly_when_the_first_verdict_comes():
    from monitors.leaks import LeakDetector

    det = LeakDetector()
    verdicts = [det.add(100 * 2**20).status for _ in range(det.runs_needed)]
    assert verdicts[-2] == "collecting" and verdicts[-1] == "none"


def test_device_memory_is_followed_by_each_source_and_the_nearest_to_a_leak_is_shown():
    from monitors.events import Phase, RunFinished
    from tui_app.core.session import Session

    s = Session()
    assert s.device_leak_text() is None  # off CUDA no run reports device memory
    rng = random.Random(3)
    for i in range(20):
        # a 1 MB/run tensor leak: torch allocated exactly, reserved in 2 MB segments, NVML on top of the context
        allocated = (500 + i) * MB
        s.feed(
            RunFinished(
                i,
                8,
                "max tokens",
                "",
                0,
                900 * MB,
                None,
                allocated,
                None,
                None,
                "",
                gpu_reserved=(520 + 2 * (i // 2)) * MB,
                gpu_proc_mem=int((1100 + 2 * (i // 2) + rng.gauss(0, 0.2)) * MB),
            )
        )
    assert set(s.device_verdicts) == {"torch allocated", "torch reserved", "NVML process"}
    assert all(v.status == "suspected" for v in s.device_verdicts.values())
    assert s.verdict.status == "none"  # the host's memory is flat: the leak is on the device only
    name, verdict = s.device_leak()
    assert verdict.mb_per_run == pytest.approx(1.0, abs=0.1)
    assert s.device_leak_text() == f"GPU {verdict.text()} in {name}" and "suspected" in s.device_leak_text()
    s.feed(Phase("compile", "graphs", True, 3.0))  # CUDA-graph pools: a legitimate rise, a new series
    assert s.device_leak_text() is None and all(d.seen == 0 for d in s.device_leaks.values())
    for i in range(12):
        reserved = (700 + (4 if i > 1 else 0)) * MB  # one more segment while the caches warm up: no trend
        s.feed(RunFinished(100 + i, 8, "eos", "", 0, 900 * MB, None, 600 * MB, None, None, "", gpu_reserved=reserved, gpu_proc_mem=1300 * MB))
        s.feed(RunFinished(200 + i, 3, "stopped", "", 0, 900 * MB, None, 900 * MB, None, None, "", gpu_reserved=2000 * MB))  # cut short: not a baseline
    assert {v.status for v in s.device_verdicts.values()} == {"none"}
    assert s.device_leak_text().startswith("GPU leak: none (")


def test_a_server_run_reports_no_device_memory():
    from monitors.events import RunFinished
    from tui_app.core.session import Session

    s = Session()
    s.feed(RunFinished(1, 8, "eos", "", None, None, None, None, None, None, ""))
    assert s.device_verdicts == {} and s.device_leak_text() is None
