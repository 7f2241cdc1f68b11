"""The lever ledger: its ratios are the runs table's own numbers, its one-time costs the engine's
phases, and its verdicts follow the ratios; on hand-made runs of known pace, and on the real engine
(a kernels test: `make test` runs it again on the portable kernels)."""

import math
import statistics

import pytest

from monitors.events import Levers, Phase
from tests.helpers.synthetic import timed_run as run
from tui_app.core import ledger
from tui_app.core.session import Session
from tui_app.requests import RunRequest


def session_of(events: list) -> Session:
    s = Session()
    for ev in events:
        s.feed(ev)
    return s


def table_tps(session: Session, label: str, prompt: int | None = None) -> float:
    """The median of the runs table's decode tok/s over a mix's whole, finished runs (of one prompt length)."""
    rows = [r for r in session.rows() if r.segment is None and r.levers_label == label and r.finished.stop_reason in ledger.FINISHED]
    return statistics.median(r.stats.decode_tps for r in rows if prompt in (None, r.stats.prompt_tokens))


def test_each_mix_is_weighed_against_plain_on_the_same_workload_with_its_one_time_cost():
    int8, int4c = Levers(quant="int8"), Levers(quant="int4", compile=True)
    events = [Phase(name="quantize", detail="int8", done=True, seconds=2.0, cost_of="quant:int8")]
    events += [Phase(name="compile", detail="batch 1, int4: torch.compile", done=True, seconds=30.0, cost_of="compile:int4")]
    events += [Phase(name="compile", detail="batch 1, int4: recompiled", done=True, seconds=4.0, cost_of="recompile:int4", graph_breaks=2)]
    events += [Phase(name="quantize", detail="int4", done=True, seconds=1.0, cost_of="quant:int4")]
    paces = [(Levers(), 50), (int8, 25), (Levers(), 52), (int8, 26), (Levers(), 48), (int8, 24), (int4c, 60), (int4c, 61), (int4c, 59)]
    for i, (lev, ms) in enumerate(paces, 1):
        events += run(i, lev, ms)
    events += run(20, int8, 5, stop="stopped")  # not a measurement: left out
    events += run(21, int8, 5, prompt=99)  # no plain run of its workload: no entry
    session = session_of(events)
    found = {e.levers: e for e in ledger.entries(session)}
    assert set(found) == {"cache int8", "cache compile int4"}
    e = found["cache int8"]
    assert e.decode == pytest.approx(table_tps(session, "cache int8", 40) / table_tps(session, "cache"))
    assert e.decode == pytest.approx(2.0, rel=0.01) and e.decode_ci[0] > 1.5 and e.runs == 3 and e.plain_runs == 3
    assert e.one_time_s == 2.0 and e.recompiles == 0
    assert e.payback_tokens == pytest.approx(2.0 / (0.050 - 0.025), rel=0.02)  # 80 tokens at 25 ms saved a token
    assert e.verdict.startswith("pays here: 2.0× decode") and "80 tokens" in e.verdict
    slow = found["cache compile int4"]
    assert slow.one_time_s == 35.0 and slow.recompiles == 1 and slow.graph_breaks == 2 and math.isinf(slow.payback_tokens)
    assert slow.verdict.startswith("does not pay here: 0.83× decode")
    assert "never" in slow.row() and "35.0 s (1 recompile, 2 graph breaks)" in slow.row()


def test_a_difference_the_interval_does_not_bear_out_is_no_difference():
    events = []
    for i, (lev, ms) in enumerate([(Levers(), 50), (Levers(spec="lookup"), 40), (Levers(), 35), (Levers(spec="lookup"), 52)], 1):
        events += run(i, lev, ms)
    (e,) = ledger.entries(session_of(events))
    assert e.decode_ci[0] < 1 < e.decode_ci[1] and e.verdict.startswith("no clear difference here")


def test_a_mix_that_spends_less_energy_a_token_says_so_with_the_counters_source():
    """Where a counter gave each run's energy (here the CPU packages' RAPL, at a sample before and
    after each run), the verdict weighs the mix's J a token against plain's, the medians of each."""
    from monitors.events import Sampled
    from tui_app.core.energy import CPU

    events, counted_mj = [], 0
    int8 = Levers(quant="int8")
    for i, (lev, ms, watts) in enumerate([(Levers(), 50, 20.0), (int8, 25, 22.0), (Levers(), 52, 20.0), (int8, 26, 22.0)], 1):
        started, *steps, finished = run(i, lev, ms)
        events += [Sampled(t_ns=started.t_ns, cpu_energy_mj=counted_mj), started, *steps, finished]
        counted_mj += round(watts * (finished.t_ns - started.t_ns) / 1e6)  # the run's span at its power
        events.append(Sampled(t_ns=finished.t_ns, cpu_energy_mj=counted_mj))
    session = session_of(events)
    (e,) = ledger.entries(session)
    plain = statistics.median(20.0 * (0.1 + 19 * ms / 1000) / 20 for ms in (50, 52))
    mix = statistics.median(22.0 * (0.1 + 19 * ms / 1000) / 20 for ms in (25, 26))
    assert e.energy == f"{mix / plain:.2f}× plain's energy a token ({mix:.3g} vs {plain:.3g} J, {CPU})"
    assert e.verdict.startswith("pays here: 2.0× decode") and e.verdict.endswith(e.energy)
    assert ledger.entries(session_of([ev for ev in events if not isinstance(ev, Sampled)]))[0].energy == ""


def test_without_plain_runs_the_ledger_says_what_to_run():
    assert "run plain" in ledger.lines(session_of(run(1, Levers(quant="int8"), 20)))[0]


@pytest.mark.kernels
def test_on_the_engine_the_ledger_is_the_runs_tables_and_its_verdicts_follow_it(plain, collect):
    """Plain, int8 and int4 in turns on the real model, whatever kernels this CPU runs: each
    verdict says pays where the table's decode tok/s is clearly faster, and not where slower."""
    from tui_app.commands.bench import apply_levers

    req = RunRequest(preset="short", max_new_tokens=16, ignore_eos=True)
    for _ in range(3):
        for levers in ({}, {"quant": "int8"}, {"quant": "int4"}):
            apply_levers(plain, levers)
            plain.run(req)
    session = session_of(collect)
    found = {e.levers: e for e in ledger.entries(session)}
    assert set(found) == {"cache int8", "cache int4"}, found
    for label, e in found.items():
        assert e.decode == pytest.approx(table_tps(session, label) / table_tps(session, "cache"))
        spent = sum(ev.seconds for ev in collect if isinstance(ev, Phase) and ev.cost_of == f"quant:{label.split()[-1]}")
        assert e.one_time_s == pytest.approx(spent) and e.runs == 3 and e.plain_runs == 3
        clear = e.decode_ci is not None and (e.decode_ci[0] > 1 or e.decode_ci[1] < 1) and abs(e.decode - 1) > ledger.EVEN
        word = ("pays" if e.decode > 1 else "does not pay") if clear else "no clear difference"
        assert e.verdict.startswith(word + " here"), e
