"""The anatomy of a decode step (tui_app/engine/anatomy.py) on the default model: its step time
against the engine's own clock for the same steps, a known delay put into one layer's MLP found in
the MLP's row, the trace read back, and the refusals."""

from __future__ import annotations

import json
import statistics
import time

import pytest

from monitors.events import Anatomy, LeverRefused, Levers, RunFinished, Step
from tui_app.commands.bench import apply_levers
from tui_app.core import readings
from tui_app.requests import Profile, RunRequest

STEPS = 8
SPIN_MS = 20.0  # ten times one layer's MLP (about 2 ms a step here)


def profiled(engine, collect, path, steps: int = STEPS) -> tuple[Anatomy, list[Step]]:
    collect.clear()
    engine.command(Profile(str(path), steps))
    engine.run(RunRequest(max_new_tokens=steps + 6, ignore_eos=True))
    (ev,) = [e for e in collect if isinstance(e, Anatomy)]
    decode = [e for e in collect if isinstance(e, Step) and e.kind == "decode"]
    return ev, decode[:steps]  # the window is the first decode steps after the request


def _spin(ms: float):
    def hook(module, args, out):
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass

    return hook


@pytest.mark.serial
def test_the_parts_account_for_the_step_and_a_delay_in_one_mlp_lands_in_the_mlp_row(plain, collect, tmp_path):
    ev, steps = profiled(plain, collect, tmp_path / "a.json")
    assert ev.steps == STEPS and list(ev.parts)[:5] == ["embedding", "attention", "mlp", "norms", "lm_head"]
    assert list(ev.parts)[-3:] == ["sampling", "host_read", "framework"]
    assert sum(ev.parts.values()) == pytest.approx(ev.step_ms, rel=1e-6)
    # The profiler's step against the engine's own clock for the same steps (Step.compute_ns:
    # perf_counter from the step's start to its tokens in hand): the anatomy accounts for the step.
    # Step by step from the trace, the median of each: one step held up outside the profiler's
    # range (a fresh clone, 2026-12-02: means of 69.8 against 78.0 ms, a step's worth of 65 ms)
    # moves one mean and not the other, and no step's figure is what the test is about.
    trace = json.loads((tmp_path / "a.json").read_text())
    traced = [e["dur"] / 1000 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == "tt.step" and e.get("cat") == "user_annotation"]
    assert len(traced) == STEPS and ev.step_ms == pytest.approx(statistics.mean(traced), rel=1e-3)
    engine_ms = [s.compute_ns / 1e6 for s in steps]
    assert statistics.median(traced) == pytest.approx(statistics.median(engine_ms), rel=0.05), (traced, engine_ms)
    assert ev.parts["attention"] > 0 and ev.parts["mlp"] > 0 and ev.parts["framework"] < 0.25 * ev.step_ms, ev.parts

    hook = plain.model.model.layers[3].mlp.register_forward_hook(_spin(SPIN_MS))
    try:
        slow, _ = profiled(plain, collect, tmp_path / "b.json")
    finally:
        hook.remove()
    # The slow window read alone, each layer's MLP against the others' in the same steps: between
    # two windows seconds apart the machine's pace once moved 2.25× (attention 39 ms a step, then
    # 88: the Zen 4, 2026-12-02, its memory bandwidth swinging between 14 and 23 GB/s every few
    # seconds), which no figure scaled from one window to the other survives.
    trace = json.loads((tmp_path / "b.json").read_text())
    mlps = sorted((e["ts"], e["dur"] / 1000) for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == "tt.mlp")
    n = plain.n_layers
    assert len(mlps) == STEPS * n
    third = [d for i, (_, d) in enumerate(mlps) if i % n == 3]
    others = [d for i, (_, d) in enumerate(mlps) if i % n != 3]
    said = (slow.parts, statistics.mean(third), statistics.mean(others))
    # The row holds each layer's MLP, the delayed one's with its delay: n layers at the others' mean, and the delay.
    assert slow.parts["mlp"] - n * statistics.mean(others) == pytest.approx(SPIN_MS, abs=0.3 * SPIN_MS), said
    assert statistics.mean(third) - statistics.median(others) == pytest.approx(SPIN_MS, rel=0.1), said
    assert slow.parts["framework"] < 0.25 * slow.step_ms, said  # nothing of the delay outside the parts

    lines = readings.anatomy_lines(slow)
    assert any(line.lstrip().startswith("MLP") and "█" in line for line in lines) and str(tmp_path / "b.json") in lines[-1]


def test_the_trace_holds_the_window_steps_and_their_parts(plain, collect, tmp_path):
    """torch's Chrome trace export, read back as Perfetto and chrome://tracing read it (the
    traceEvents array, a complete event ("ph": "X") per range) and by Holistic Trace Analysis."""
    ev, _ = profiled(plain, collect, tmp_path / "t.json", steps=4)
    trace = json.loads((tmp_path / "t.json").read_text())
    ranges = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith("tt.")]
    assert sum(e["name"] == "tt.step" for e in ranges) == ev.steps == 4
    assert sum(e["name"] == "tt.mlp" for e in ranges) == 4 * plain.n_layers
    step_us = sum(e["dur"] for e in ranges if e["name"] == "tt.step") / 4
    assert step_us / 1000 == pytest.approx(ev.step_ms, rel=0.02)
    # Holistic Trace Analysis, which reads torch profiler traces: its parser takes the file whole.
    from hta.common.trace import parse_trace_file

    _, frame, symbols = parse_trace_file(str(tmp_path / "t.json"))
    names = symbols.get_sym_table()
    frame["label"] = [names[i] for i in frame["name"]]
    steps = frame[frame["label"] == "tt.step"]
    assert len(steps) == 4 and (frame["label"] == "tt.mlp").sum() == 4 * plain.n_layers
    assert steps["dur"].mean() / 1000 == pytest.approx(ev.step_ms, rel=0.02)
    # Each step's MLP ranges lie inside it, on HTA's own time axis.
    for _, step in steps.iterrows():
        inside = frame[(frame["label"] == "tt.mlp") & (frame["ts"] >= step["ts"]) & (frame["end"] <= step["end"])]
        assert len(inside) == plain.n_layers


@pytest.mark.serial
def test_int4_shrinks_the_projections_and_compile_folds_the_framework_into_one_graph(plain, collect, tmp_path):
    """The issue's lever checks, as shares of the step (docs/performance.md has the times): int4's
    projections, inside attention and the MLP, take a fraction of fp32's; compile makes the forward
    one graph, and the Python between int4's many small ops (a third of its eager step) goes.
    fp32 and int4 take turns (fp32, int4, fp32, int4; each variant kept, so a turn is its window
    alone): their times are of windows seconds apart, and this machine's pace moves 2-4x for
    seconds at a time. int4's faster window against fp32's slower fails only where both of int4's
    fell in a slow spell and neither of fp32's did."""

    def proj(ev):
        return ev.parts["attention"] + ev.parts["mlp"]

    windows = []
    for k, combo in enumerate([{}, {"quant": "int4"}] * 2):
        apply_levers(plain, combo)
        if k == 1:  # int4's first run: its kernels' first calls
            plain.run(RunRequest(max_new_tokens=4, ignore_eos=True))
        windows.append(profiled(plain, collect, tmp_path / f"w{k}.json")[0])
    fp32, int4 = [proj(w) for w in windows[::2]], [proj(w) for w in windows[1::2]]
    assert min(int4) < 0.5 * max(fp32), (fp32, int4)
    eager = windows[3]
    apply_levers(plain, {"quant": "int4", "compile": True})
    plain.run(RunRequest(max_new_tokens=4, ignore_eos=True))  # its graphs are built here
    graph, _ = profiled(plain, collect, tmp_path / "int4-compile.json")

    assert list(graph.parts) == ["compiled graph (torch.compile)", "sampling", "host_read", "framework"], graph.parts
    share = [ev.parts["framework"] / ev.step_ms for ev in (eager, graph)]
    assert share[1] < 0.5 * share[0], share
    assert graph.ops < 0.1 * eager.ops, (graph.ops, eager.ops)
    # fp32's graph calls an op named for attention: still the graph, not the attention part.
    apply_levers(plain, {"compile": True})
    plain.run(RunRequest(max_new_tokens=4, ignore_eos=True))
    fp32_graph, _ = profiled(plain, collect, tmp_path / "compile.json")
    assert list(fp32_graph.parts) == list(graph.parts) and fp32_graph.parts["framework"] < 0.2 * fp32_graph.step_ms, fp32_graph.parts


def test_a_trace_that_cannot_be_written_loses_the_trace_not_the_anatomy_or_the_run(plain, collect, tmp_path, capfd):
    (tmp_path / "a-file").write_text("")
    ev, _ = profiled(plain, collect, tmp_path / "a-file" / "t.json", steps=2)
    assert ev.steps == 2 and ev.trace == "" and "a-file" in ev.trace_error
    assert any(isinstance(e, RunFinished) and e.stop_reason == "max tokens" for e in collect)
    assert readings.anatomy_lines(ev)[-1].strip().startswith("trace not written:")
    # Kineto's own lines as the profiler starts and stops ("USDT: ... profiler_start") stay off stderr.
    assert "profiler_st" not in capfd.readouterr().err


def test_a_window_without_decode_steps_to_take_is_refused_with_the_reason(plain, collect, tmp_path):
    apply_levers(plain, {"cache": False})
    collect.clear()
    plain.command(Profile(str(tmp_path / "x.json"), 4))
    (refused,) = [e for e in collect if isinstance(e, LeverRefused)]
    assert refused.lever == "profile" and "turn the cache on" in refused.reason
    assert plain.anatomy is None and plain.decoder.mark("tt.step").__class__.__name__ == "nullcontext"


def _safetensors_bytes(folder) -> int:
    """The weights' bytes by the safetensors file's own header (shapes and dtypes), not tokentop's count."""
    import math

    from safetensors import safe_open

    size = {"F32": 4, "F16": 2, "BF16": 2}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) * size[f.get_slice(k).get_dtype()] for k in f.keys())  # noqa: SIM118 - safe_open has keys(), not iteration


@pytest.mark.serial
def test_the_roofline_counts_the_weights_and_the_kv_a_step_reads_and_weighs_the_steps_ops(plain, collect, tmp_path):
    from tui_app.core.session import Session
    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf
    from tui_app.requests import Probe

    collect.clear()
    plain.command(Probe())  # the read ceiling of these weights, in this run's events
    plain.command(Profile(str(tmp_path / "r.json"), STEPS))
    plain.run(RunRequest(max_new_tokens=3 * STEPS, ignore_eos=True))
    session = Session.from_events(list(collect))
    verdict = session.run_rooflines[session.anatomies["cache"].run_id]
    last = [e for e in collect if isinstance(e, Step)][-1]
    kv_formula = 2 * 4 * 1 * last.seq_len * plain.n_layers * plain.kv_heads * plain.head_dim  # fp32, batch 1
    assert verdict.step_bytes == pytest.approx(_safetensors_bytes(_gguf_cache_dir(find_default_gguf())) + kv_formula, rel=0.01)
    # The default model's step is mostly torch's ops (its GEMVs): the verdict is not overhead. How
    # much lies outside them is the CPU's (14 % on the Zen 4 EPYC, docs/performance.md; 20.4 % on an Intel Xeon).
    assert verdict.outside < readings.OVERHEAD_BOUND and verdict.wall != "overhead" and not verdict.text.startswith("overhead-bound"), verdict.text
    assert 0 < verdict.frac < 1.5 and "of the read ceiling" in verdict.text
    # The verdict stays in its run's row: the runs table's wall and the export.
    from tui_app.core.columns import columns_for
    from tui_app.core.export import export_session

    (row,) = session.rows()
    assert row.roofline is verdict
    wall = next(c for c in columns_for([row]) if c.title == "wall")
    assert wall.cell(row) == f"{verdict.wall} {verdict.frac:.0%} read" and verdict.wall in ("memory", "neither"), wall.cell(row)
    export_session(session, str(tmp_path / "s.json"))
    assert json.loads((tmp_path / "s.json").read_text())["runs"][0]["roofline"] == verdict.text


@pytest.mark.serial
def test_the_roofline_of_a_tiny_model_is_overhead(tmp_path):
    """A Llama with 16-wide layers: its ops are microseconds, the Python around them is the step."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tui_app.core.session import Session
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(_gguf_cache_dir(find_default_gguf()))).save_pretrained(tmp_path)
    session = Session()
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu"), session.feed)
    engine.load()
    engine.run(RunRequest(max_new_tokens=8, ignore_eos=True))  # warm
    engine.command(Profile(str(tmp_path / "t.json"), STEPS))
    engine.run(RunRequest(max_new_tokens=3 * STEPS, ignore_eos=True))
    verdict = session.run_rooflines[session.anatomies["cache"].run_id]
    assert verdict.text.startswith("overhead-bound"), verdict.text
    assert [r.roofline.short() if r.roofline else "" for r in session.rows()] == ["", "overhead"]


def test_the_gpus_idle_gaps_between_a_steps_kernels():
    """Kernel events as the profiler gives them on CUDA (torch's own FunctionEvent, device CUDA;
    none come on this machine: gpu_check reads real ones): a step's kernels are those that start
    in its range; two that overlap (two streams) count once; the gaps between them are idle. Each
    host range also comes back as a GPU annotation over its kernels: neither a step nor a kernel."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from tui_app.engine.anatomy import kernel_gaps, read_anatomy

    def event(name, start, end, device=DeviceType.CPU, annotation=False):
        return FunctionEvent(id=start, name=name, thread=0, start_us=start, end_us=end, device_type=device, is_user_annotation=annotation)

    def kernel(start, end):
        return event("gemv", start, end, DeviceType.CUDA)

    def on_gpu(name, start, end):
        return event(name, start, end, DeviceType.CUDA, annotation=True)

    window = [event("tt.step", 0, 100), on_gpu("tt.step", 5, 95), on_gpu("tt.forward", 5, 80), kernel(10, 30), kernel(20, 40), kernel(60, 70)]
    window += [event("tt.step", 100, 200), on_gpu("tt.step", 105, 195), kernel(110, 190), kernel(205, 210)]
    busy, idle = kernel_gaps(window)
    # Step 1: busy 10-40 and 60-70 (40 µs), idle 40-60 (20 µs); step 2: busy 80, idle 0; the kernel after the last step is no step's.
    assert (busy, idle) == (pytest.approx((40 + 80) / 2), pytest.approx(20 / 2))
    assert kernel_gaps([e for e in window if e.device_type == DeviceType.CPU]) == (0.0, 0.0)  # the CPU: no kernels
    assert kernel_gaps(window, DeviceType.XPU) == kernel_gaps(window, None) == (0.0, 0.0)  # another device's, the CPU's: none
    xpu = [event(e.name, e.time_range.start, e.time_range.end, DeviceType.XPU, e.is_user_annotation) if e.device_type == DeviceType.CUDA else e for e in window]
    assert kernel_gaps(xpu, DeviceType.XPU) == (busy, idle)  # an Intel GPU's kernels, read as CUDA's are
    assert read_anatomy(window)[:2] == (2, 100.0)  # two steps of 100 µs: the annotations are not steps
    text = readings.gpu_gaps_text(Anatomy(run_id=1, steps=2, step_ms=0.1, parts={}, gpu_ms={}, trace="", levers=Levers(), gpu_busy_ms=0.04, gpu_idle_ms=0.02))
    assert "idle 0.020 ms" in text and "33% of their span" in text and "CUDA graphs" in text
