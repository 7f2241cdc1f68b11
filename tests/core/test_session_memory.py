"""The Session's memory: the baselines the leak detector fits (restarted by a preparation phase),
each device memory source followed, what a server run leaves out, where the engine's memory goes
and the roofline weighed by NVML's DRAM share on a GPU with GPM."""

import random

import pytest

from monitors.events import Levers, RunFinished, RunStarted, Sampled, Step
from tests.helpers.synthetic import session_events
from tui_app.core import readings
from tui_app.core.session import Session

MB = 2**20


def test_a_preparation_phase_restarts_the_baseline_series():
    from monitors.events import Phase, RunFinished
    from tui_app.core.session import Session

    s = Session()
    for i in range(12):
        s.feed(
            RunFinished(
                run_id=i,
                n_tokens=1,
                stop_reason="eos",
                text="",
                peak_rss=0,
                baseline_rss=(900 + i) * MB,
                torch_peak=None,
                gpu_baseline=None,
                perplexity=None,
                first_diff=None,
                diff_note="",
            )
        )
    assert s.verdict.status == "suspected"
    s.feed(Phase(name="quantize", detail="int8", done=True, seconds=1.0))  # a quantized copy: +100 MB, legitimately
    assert s.verdict is None and s.leak.seen == 0
    for i in range(12):
        s.feed(
            RunFinished(
                run_id=100 + i,
                n_tokens=1,
                stop_reason="eos",
                text="",
                peak_rss=0,
                baseline_rss=1100 * MB,
                torch_peak=None,
                gpu_baseline=None,
                perplexity=None,
                first_diff=None,
                diff_note="",
            )
        )
    assert s.verdict.status == "none"


def test_device_memory_is_followed_by_each_source_and_the_nearest_to_a_leak_is_shown():
    from monitors.events import Phase, RunFinished
    from tui_app.core.session import Session

    s = Session()
    assert readings.device_leak_text(s) is None  # off CUDA no run reports device memory
    rng = random.Random(3)
    for i in range(20):
        # a 1 MB/run tensor leak: torch allocated exactly, reserved in 2 MB segments, NVML on top of the context
        allocated = (500 + i) * MB
        s.feed(
            RunFinished(
                run_id=i,
                n_tokens=8,
                stop_reason="max tokens",
                text="",
                peak_rss=0,
                baseline_rss=900 * MB,
                torch_peak=None,
                gpu_baseline=allocated,
                perplexity=None,
                first_diff=None,
                diff_note="",
                gpu_reserved=(520 + 2 * (i // 2)) * MB,
                gpu_proc_mem=int((1100 + 2 * (i // 2) + rng.gauss(0, 0.2)) * MB),
            )
        )
    assert set(s.device_verdicts) == {"torch allocated", "torch reserved", "NVML process"}
    assert all(v.status == "suspected" for v in s.device_verdicts.values())
    assert s.verdict.status == "none"  # the host's memory is flat: the leak is on the device only
    name, verdict = readings.device_leak(s)
    assert verdict.mb_per_run == pytest.approx(1.0, abs=0.1)
    assert readings.device_leak_text(s) == f"GPU {verdict.text()} in {name}" and "suspected" in readings.device_leak_text(s)
    s.feed(Phase(name="compile", detail="graphs", done=True, seconds=3.0))  # CUDA-graph pools: a legitimate rise, a new series
    assert readings.device_leak_text(s) is None and all(d.seen == 0 for d in s.device_leaks.values())
    for i in range(12):
        reserved = (700 + (4 if i > 1 else 0)) * MB  # one more segment while the caches warm up: no trend
        s.feed(
            RunFinished(
                run_id=100 + i,
                n_tokens=8,
                stop_reason="eos",
                text="",
                peak_rss=0,
                baseline_rss=900 * MB,
                torch_peak=None,
                gpu_baseline=600 * MB,
                perplexity=None,
                first_diff=None,
                diff_note="",
                gpu_reserved=reserved,
                gpu_proc_mem=1300 * MB,
            )
        )
        s.feed(
            RunFinished(
                run_id=200 + i,
                n_tokens=3,
                stop_reason="stopped",
                text="",
                peak_rss=0,
                baseline_rss=900 * MB,
                torch_peak=None,
                gpu_baseline=900 * MB,
                perplexity=None,
                first_diff=None,
                diff_note="",
                gpu_reserved=2000 * MB,
            )
        )  # cut short: not a baseline
    assert {v.status for v in s.device_verdicts.values()} == {"none"}
    assert readings.device_leak_text(s).startswith("GPU leak: none (")


def test_a_server_run_reports_no_device_memory():
    from monitors.events import RunFinished
    from tui_app.core.session import Session

    s = Session()
    s.feed(
        RunFinished(
            run_id=1,
            n_tokens=8,
            stop_reason="eos",
            text="",
            peak_rss=None,
            baseline_rss=None,
            torch_peak=None,
            gpu_baseline=None,
            perplexity=None,
            first_diff=None,
            diff_note="",
        )
    )
    assert s.device_verdicts == {} and readings.device_leak_text(s) is None


def test_the_memory_budget_splits_the_engines_memory_into_parts_that_sum_to_it():
    """CPU: RSS = weights in use + KV (while a run is in flight) + the rest. GPU: NVML's count of the
    process = weights + KV + activations + the allocator's cache + outside torch (the torch and
    NVML figures here are given, as a GPU's would be: there is none on this machine)."""
    from dataclasses import replace

    from monitors.events import TorchMemory

    events = session_events(runs=1, tokens=8)
    s = Session.from_events(events)
    assert readings.memory_budget(s) is None or readings.memory_budget(s)[0] == "engine"
    s.feed(Sampled(t_ns=10**12, engine_rss=900 * 2**20))
    name, whole, parts = readings.memory_budget(s)
    assert name == "engine" and whole == 900 * 2**20 and sum(n for _, n in parts) == whole
    assert dict(parts)["weights"] == s.bandwidth.weight_bytes and dict(parts)["KV"] == 0  # the run has ended: its cache is freed
    started = next(e for e in events if isinstance(e, RunStarted))
    s.feed(replace(started, run_id=2))
    s.feed(next(e for e in events if isinstance(e, Step) and e.kv_bytes))
    kv = dict(readings.memory_budget(s)[2])["KV"]
    assert kv == (s.kv[-1].alloc or s.kv[-1].measured) > 0
    assert readings.budget_text(readings.memory_budget(s)).startswith("engine 900 MiB (weights 513 + KV ")
    s.feed(TorchMemory(device="cuda:0", allocated=3 * 2**30, reserved=4 * 2**30, peak=4 * 2**30))
    s.feed(Sampled(t_ns=2 * 10**12, engine_rss=900 * 2**20, gpu_proc_mem=5 * 2**30))
    name, whole, parts = readings.memory_budget(s)
    assert name == "GPU engine" and whole == 5 * 2**30 and sum(n for _, n in parts) == whole
    assert dict(parts)["cache"] == 2**30 and dict(parts)["outside torch"] == 2**30
    assert dict(parts)["activations"] == 3 * 2**30 - s.bandwidth.weight_bytes - kv


def test_on_a_gpu_with_gpm_the_roofline_weighs_the_dram_bandwidth_nvml_measured_over_the_run():
    """The same anatomy and steps: without GPM the verdict weighs the bytes against the m probe's
    read rate (36 GB/s here: neither wall); with GPM's DRAM % in the run's samples, that measurement."""
    from dataclasses import replace

    from monitors.events import Anatomy

    events = session_events(runs=1, tokens=24)
    end = next(i for i, e in enumerate(events) if isinstance(e, RunFinished))
    anatomy = Anatomy(run_id=1, steps=8, step_ms=60.0, parts={"mlp": 50.0, "framework": 10.0}, gpu_ms={}, trace="t.json", levers=Levers(), ops_ms=50.0, ops=300)
    plain = Session.from_events([*events[:end], anatomy, *events[end:]])
    assert plain.run_rooflines[1].wall == "neither" and "the m probe" in plain.run_rooflines[1].text
    gpm = [replace(e, gpu_dram_pct=84.0) if isinstance(e, Sampled) else e for e in events[:end]]
    measured = Session.from_events([*gpm, anatomy, *events[end:]]).run_rooflines[1]
    assert measured.wall == "memory" and measured.frac == pytest.approx(0.84)
    assert measured.text.startswith("memory-bound: the GPU's DRAM bandwidth 84% in use over the run (NVML GPM)"), measured.text
