"""The live memory read rate (Session.read_rate: `mem bw` in the status line and the util pane)
against the same figure computed here from a real run's recorded events and the weights' bytes by
formula; the measurement it is a fraction of; and when it is taken."""

import itertools

import pytest
import torch

from monitors.events import Bandwidth, Phase, RunStarted, Step
from monitors.record import Recorder, read_recording
from tui_app.commands.bench import apply_levers
from tui_app.core import readings
from tui_app.core.session import READ_WINDOW, Session
from tui_app.engine import bandwidth
from tui_app.requests import Probe, RunRequest


def int8_bytes(engine) -> int:
    """The int8 variant's bytes a step reads, by its format: a byte per linear weight and an fp32
    scale per output row (the tied head has its own int8 copy), the fp32 norms and rotary tables;
    the embedding table is not read whole (one row per token)."""
    q = engine.control.variants["int8"]
    norms = sum(p.numel() for n, p in q.named_parameters() if "norm" in n)
    rotary = sum(b.numel() * b.element_size() for b in engine.model.buffers())
    linears = [m for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    return 4 * norms + rotary + sum(m.weight.numel() + 4 * m.out_features for m in linears)


def test_the_read_rate_shown_is_the_recorded_steps_bytes_over_their_intervals(plain, collect, tmp_path):
    apply_levers(plain, {"quant": "int8"})
    plain.run(RunRequest(max_new_tokens=READ_WINDOW + 8, ignore_eos=True))
    recorder = Recorder(tmp_path / "run.jsonl")
    for ev in collect:
        recorder.write(ev)
    recorder.close()
    events = read_recording(tmp_path / "run.jsonl").events

    probes = [e for e in events if isinstance(e, Bandwidth)]
    assert len(probes) == 1  # the weights changed once: measured once, before the run
    probe, formula = probes[0], int8_bytes(plain)
    assert probe.quant == "int8" and probe.weight_bytes == formula
    assert 0.98 * formula <= probe.read_bytes <= formula + 64 * 200  # runs under 1 MiB left out, alignment padding in
    assert probe.read_bps > 0
    assert events.index(probe) < next(i for i, e in enumerate(events) if isinstance(e, RunStarted))

    steps = [e for e in events if isinstance(e, Step) and e.kind == "decode"][-READ_WINDOW:]
    assert len(steps) == READ_WINDOW
    expected = sum(formula + s.kv_bytes for s in steps) / sum(s.dt_ns for s in steps) * 1e9

    session = Session()  # as replay folds the recording
    for ev in events:
        session.feed(ev)
    rate, frac = readings.read_rate(session)
    assert rate == pytest.approx(expected, rel=0.01)
    assert frac == pytest.approx(expected / probe.read_bps, rel=0.01)


def test_a_measurement_asked_for_in_a_run_is_a_phase_outside_the_steps_intervals(plain, collect):
    plain.run(RunRequest(max_new_tokens=4))
    assert not any(isinstance(e, Bandwidth) for e in collect)  # the weights did not change: not measured again
    collect.clear()
    plain.run(RunRequest(max_new_tokens=4), poll=lambda: [Probe()] if not collect[1:] else [])
    started = next(e for e in collect if isinstance(e, RunStarted))
    probe = next(e for e in collect if isinstance(e, Bandwidth))
    phase = next(e for e in collect if isinstance(e, Phase) and e.name == "bandwidth")
    first = next(e for e in collect if isinstance(e, Step))
    assert collect.index(started) < collect.index(probe) < collect.index(phase) < collect.index(first)
    assert probe.quant == "off" and probe.weight_bytes == bandwidth.weight_bytes(plain.model)
    assert phase.done and phase.seconds > 0
    assert first.dt_ns == first.t_ns - started.t_ns - round(phase.seconds * 1e9)  # TTFT leaves the measurement out


def covered(view, tensors) -> bool:
    """Every byte of `view` is a byte of one of `tensors`, or padding of under 64 bytes between two."""
    lo, hi = view.data_ptr(), view.data_ptr() + view.numel() * 8
    pos = lo
    for a, b in sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors):
        if b <= pos or a >= hi:
            continue
        if a > pos + 64:
            return False
        pos = max(pos, b)
    return pos >= hi


@pytest.mark.kernels
@pytest.mark.parametrize("level", ["off", "int8", "int4"])
def test_spans_read_only_the_weights_a_step_reads_and_nearly_all_of_them(plain, level):
    """Whatever the layout (per-tensor storages, the pools, the fp model moved onto huge pages by an
    earlier compile): the views are disjoint, lie on the read tensors, and hold at least 94 % of
    their bytes (only runs under 1 MiB are left out)."""
    if level != "off":
        apply_levers(plain, {"quant": level})
    model = plain.control.variants[level]
    tensors = [p for t in bandwidth._read_tensors(model) for p in bandwidth._plain(t)]
    views = bandwidth.spans(model)
    ranges = sorted((v.data_ptr(), v.data_ptr() + v.numel() * 8) for v in views)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    assert all(covered(v, tensors) for v in views)
    nbytes = sum(v.numel() * 8 for v in views)
    assert 0.94 * bandwidth.weight_bytes(model) <= nbytes <= bandwidth.weight_bytes(model) + 64 * len(tensors)
    read, rate = bandwidth.read_rate(model, repeats=2)
    assert read == nbytes and rate > 0
