"""The Session: the one fold of the event stream that every reader (the app, the headless lines,
replay, the report, the export) takes its numbers from."""

import random

import pytest

from monitors.events import Bandwidth, LeverChanged, Levers, RunFinished, RunStarted, Sampled, ServerSample, Step
from tests.helpers.synthetic import session_events
from tui_app.core import readings
from tui_app.core.columns import COLUMNS
from tui_app.core.session import Session

MB = 2**20


def test_the_session_counts_decode_steps_of_the_current_weights_only():
    s = Session()
    mib = 2**20
    s.feed(RunStarted(run_id=1, levers=Levers(), prompt_tokens=10, max_new_tokens=8, prompt_text="p"))
    s.feed(
        Step(
            run_id=1,
            step=1,
            kind="prefill",
            token_ids=[1],
            text="a",
            n_tokens=1,
            t_ns=0,
            dt_ns=5_000_000,
            forward_ns=0,
            kv_bytes=mib,
            kv_alloc_bytes=mib,
            seq_len=10,
        )
    )
    s.feed(
        Step(
            run_id=1,
            step=2,
            kind="decode",
            token_ids=[2],
            text="b",
            n_tokens=1,
            t_ns=1,
            dt_ns=1_000_000,
            forward_ns=0,
            kv_bytes=mib,
            kv_alloc_bytes=mib,
            seq_len=11,
        )
    )
    assert readings.read_rate(s) is None  # no measurement yet
    s.feed(Bandwidth(quant="off", weight_bytes=99 * mib, read_bytes=98 * mib, read_bps=200e9, source="a read"))
    s.feed(
        Step(
            run_id=1,
            step=3,
            kind="decode",
            token_ids=[3],
            text="c",
            n_tokens=1,
            t_ns=2_000_000,
            dt_ns=1_000_000,
            forward_ns=0,
            kv_bytes=mib,
            kv_alloc_bytes=mib,
            seq_len=12,
        )
    )
    s.feed(
        Step(
            run_id=1,
            step=4,
            kind="decode",
            token_ids=[4],
            text="d",
            n_tokens=1,
            t_ns=4_000_000,
            dt_ns=3_000_000,
            forward_ns=0,
            kv_bytes=3 * mib,
            kv_alloc_bytes=mib,
            seq_len=13,
        )
    )
    rate, frac = readings.read_rate(s)
    assert rate == pytest.approx((100 * mib + 102 * mib) / 4e-3)
    assert frac == pytest.approx(rate / 200e9)
    s.feed(Sampled(t_ns=4_500_000))
    s.feed(Sampled(t_ns=4_000_000_000))  # long after the last step: nothing is being read
    assert list(s.mem_read) == [pytest.approx(frac), None]
    s.feed(LeverChanged(run_id=1, lever="compile", value=True, levers=Levers(compile=True), segment=1))
    assert readings.read_rate(s) is None  # another step: its rate starts again
    s.feed(
        Step(
            run_id=1,
            step=5,
            kind="reprefill",
            token_ids=[5],
            text="e",
            n_tokens=1,
            t_ns=9_000_000,
            dt_ns=5_000_000,
            forward_ns=0,
            kv_bytes=mib,
            kv_alloc_bytes=mib,
            seq_len=14,
        )
    )
    assert readings.read_rate(s) is None  # a prefill reads at compute speed: not a decode step


def test_a_server_run_has_no_read_rate():
    s = Session()
    s.feed(Bandwidth(quant="off", weight_bytes=100, read_bytes=100, read_bps=1e9, source="a read"))
    s.feed(RunStarted(run_id=1, levers=Levers(server="a"), prompt_tokens=10, max_new_tokens=8, prompt_text="p"))
    s.feed(
        Step(
            run_id=1,
            step=1,
            kind="decode",
            token_ids=[1],
            text="a",
            n_tokens=1,
            t_ns=0,
            dt_ns=1_000_000,
            forward_ns=0,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=11,
        )
    )
    assert readings.read_rate(s) is None


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


def test_run_finished_from_a_server_has_no_engine_only_fields():
    fin = RunFinished(
        run_id=1,
        n_tokens=3,
        stop_reason="eos",
        text="x",
        peak_rss=None,
        baseline_rss=None,
        torch_peak=None,
        gpu_baseline=None,
        perplexity=None,
        first_diff=None,
        diff_note="reference",
        prompt_tokens=7,
    )
    s = Session()
    s.feed(fin)  # a baseline the server does not report feeds no leak detector
    assert s.verdict is None


def test_a_stall_is_marked_with_what_the_server_said():
    from monitors.events import EngineReady, Levers, RunStarted

    s = Session()
    s.feed(
        EngineReady(
            model="m",
            source="http://h:1",
            device="vLLM",
            dtype="server",
            n_params=0,
            weight_bytes=0,
            n_layers=0,
            kv_heads=0,
            head_dim=0,
            kv_bytes_per_elem=0,
            context_len=2048,
            load_s=0.1,
            threads=0,
            server={"engine": "vLLM"},
        )
    )
    s.feed(RunStarted(run_id=1, levers=Levers(batch=2, server="a"), prompt_tokens=0, max_new_tokens=64, prompt_text="p"))
    t = 0
    for i in range(20):
        t += 20_000_000
        s.feed(
            Step(
                run_id=1,
                step=i + 1,
                kind="prefill" if i == 0 else "decode",
                token_ids=[],
                text="x",
                n_tokens=1,
                t_ns=t,
                dt_ns=20_000_000,
                forward_ns=0,
                kv_bytes=0,
                kv_alloc_bytes=0,
                seq_len=0,
            )
        )
        s.feed(
            Step(
                run_id=1,
                step=i + 1,
                kind="decode",
                token_ids=[],
                text="y",
                n_tokens=1,
                t_ns=t,
                dt_ns=300_000_000,
                forward_ns=0,
                kv_bytes=0,
                kv_alloc_bytes=0,
                seq_len=0,
                segment=1,
            )
        )  # the other stream: not charted
    s.feed(ServerSample(t_ns=t, values={"waiting": 3.0, "kv_usage": 0.97}, sources={}))
    assert not [m for m in s.markers if m.label.startswith("stall")]
    s.feed(
        Step(
            run_id=1,
            step=21,
            kind="decode",
            token_ids=[],
            text="z",
            n_tokens=1,
            t_ns=t + 250_000_000,
            dt_ns=250_000_000,
            forward_ns=0,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=0,
        )
    )
    assert [m.label for m in s.markers if m.label.startswith("stall")] == ["stall 250ms: waiting 3, KV 97%"]
    assert len(s.latency) == 21  # the first stream only


def test_a_run_switched_midway_is_labelled_with_the_levers_its_numbers_come_from():
    """Run 2 switches to int8 halfway: its ppl and output are int8's, so the row says cache→cache int8,
    not "cache", the starting levers, beside int8's perplexity."""
    from tui_app.commands.run import row_line

    rows = {row.label: row for row in Session.from_events(session_events(runs=2)).rows()}
    assert rows["1"].levers_label == "cache"
    assert rows["2"].levers_label == "cache→cache int8"
    assert (rows["2.0"].levers_label, rows["2.1"].levers_label) == ("cache", "cache int8")
    levers_col = next(c for c in COLUMNS if c.title == "levers")
    assert levers_col.cell(rows["2"]) == "cache→cache int8" and "[cache→cache int8]" in row_line(rows["2"])


def test_a_run_that_ends_before_its_limit_says_why():
    from dataclasses import replace

    from monitors.events import RunFinished
    from tui_app.commands.run import row_line

    events = session_events(runs=3, tokens=8)
    reasons = {1: "eos", 2: "stopped", 3: "max tokens"}
    events = [replace(e, stop_reason=reasons[e.run_id]) if isinstance(e, RunFinished) else e for e in events]
    rows = {row.label: row for row in Session.from_events(events).rows()}
    assert rows["1"].note.startswith("eos · ") and "ended: eos" in row_line(rows["1"])
    assert rows["2"].note.startswith("stopped · ") and "ended: stopped" in row_line(rows["2"])
    assert "ended" not in row_line(rows["3"]) and rows["3"].note == rows["3"].finished.diff_note


def test_every_history_is_a_ring_buffer_and_runs_are_trimmed():
    events = session_events(runs=6, tokens=40)
    s = Session.from_events(events, history=50)
    for name in ("latency", "kv", "samples"):
        assert len(getattr(s, name)) == min(50, len(getattr(Session.from_events(events), name))), name
    assert s.token_count == sum(e.n_tokens for e in events if isinstance(e, Step))  # counted whole, kept bounded
    s.trim(keep_runs=2)
    assert list(s.timer.runs) == [5, 6] and [r.run_id for r in s.rows() if r.segment is None] == [5, 6]


def test_runs_are_trimmed_by_their_per_token_detail_and_a_run_still_going_stays():
    """32 streams of 32 tokens weigh 2,800 values, 40 times a one-stream run of 32 tokens: a bound
    on the number of runs alone let an attached session grow by 0.3 MiB a run for 500 runs."""
    from monitors.timing import weight

    events = session_events(runs=6, tokens=40)
    s = Session.from_events(events)
    weights = {rid: weight(rec) for rid, rec in s.timer.runs.items()}
    assert weights[1] == 2 * (40 - 1) + 24  # the intervals twice, the segment's fields
    s.timer.runs[2].finished = None  # still going (another server's run)
    s.trim(keep_values=weights[2] + weights[5] + weights[6])
    assert list(s.timer.runs) == [2, 5, 6]  # the oldest finished let go until that much is held
    s.trim(keep_values=0)
    assert list(s.timer.runs) == [2, 6]  # the latest stays whatever it weighs


def test_a_restarted_engine_numbers_its_runs_after_every_run_seen():
    s = Session.from_events(session_events(runs=3))
    assert s.next_run_id == 4
    s.feed(RunStarted(run_id=4, levers=Levers(), prompt_tokens=10, max_new_tokens=8, prompt_text="p"))
    s.engine_died("engine process died from SIGKILL")
    assert s.next_run_id == 5 and s.died == {4: "engine died"}
    assert s.rows()[-1].note == "engine died" and s.fatal.endswith("SIGKILL")


def test_the_comparison_is_each_server_over_the_first_from_its_finished_runs():
    from monitors.events import EngineReady

    s = Session()
    for label in ("A", "B"):
        s.feed(
            EngineReady(
                model="m",
                source=label,
                device="vLLM",
                dtype="server",
                n_params=0,
                weight_bytes=0,
                n_layers=0,
                kv_heads=0,
                head_dim=0,
                kv_bytes_per_elem=0,
                context_len=2048,
                load_s=0.1,
                threads=0,
                server={"label": label},
            )
        )
    t = 0
    for run, (label, ttft, itl) in enumerate((("A", 0.1, 0.01), ("B", 0.3, 0.02), ("A", 0.1, 0.01), ("B", 0.3, 0.02)), 1):
        s.feed(RunStarted(run_id=run, levers=Levers(server=label), prompt_tokens=5, max_new_tokens=4, prompt_text="p", t_ns=t))
        for k in range(4):
            t += int((ttft if k == 0 else itl) * 1e9)
            s.feed(
                Step(
                    run_id=run,
                    step=k + 1,
                    kind="prefill" if k == 0 else "decode",
                    token_ids=[],
                    text="x",
                    n_tokens=1,
                    t_ns=t,
                    dt_ns=int((ttft if k == 0 else itl) * 1e9),
                    forward_ns=0,
                    kv_bytes=0,
                    kv_alloc_bytes=0,
                    seq_len=0,
                )
            )
        s.feed(
            RunFinished(
                run_id=run,
                n_tokens=4,
                stop_reason="max tokens",
                text="xxxx",
                peak_rss=None,
                baseline_rss=None,
                torch_peak=None,
                gpu_baseline=None,
                perplexity=None,
                first_diff=None,
                diff_note="reference",
                t_ns=t,
            )
        )
    assert readings.comparison(s) == ["B ÷ A: TTFT 3.00, ITL p50 2.00, tok/s 0.50 (2 ÷ 2 runs)"]


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
