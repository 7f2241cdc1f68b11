"""The Session: the one fold of the event stream that every reader (the app, the headless lines,
replay, the report, the export) takes its numbers from."""

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
