"""The anatomy of a decode step on CUDA (tui_app/engine/anatomy.py): each part's GPU kernel time
against the kernels the profiler's own trace holds for the window, the host's parts still summing
to the step, and Step.forward_ns (CUDA events, engine/decoding.py's GpuClock) between the two."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks.gpu_check.report import Failed, agree

STEPS = 8


def check_anatomy(bench, req) -> tuple[str, str]:
    from monitors.events import Anatomy, Step
    from tui_app.commands.bench import apply_levers
    from tui_app.requests import Profile

    apply_levers(bench.engine, {})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        bench.engine.command(Profile(str(path), STEPS))
        _, events = bench.run(req)
        found = [e for e in events if isinstance(e, Anatomy)]
        if not found:
            raise Failed("no Anatomy event after the window", "none", f"one, {STEPS} decode steps")
        ev = found[0]
        trace = json.loads(path.read_text())
    device = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels_ms = sum(e["dur"] for e in device if e["cat"] == "kernel") / 1000
    device_ms = sum(e["dur"] for e in device) / 1000  # copies and fills keep the GPU busy too
    parts_gpu = sum(ev.gpu_ms.values())
    if not ev.gpu_ms.get("attention") or not ev.gpu_ms.get("mlp"):
        raise Failed("attention's and the MLP's GPU time", str(ev.gpu_ms), "both above 0")
    # The trace also holds the kernels of the steps' edges (the window opens before a step); the
    # parts' kernels are the steps' own, so they are at most the trace's and most of it.
    agree(parts_gpu * ev.steps, kernels_ms, 0.25, what="the parts' kernel ms against the trace's kernels")
    agree(sum(ev.parts.values()), ev.step_ms, 0.01, what="the host parts against the step")
    # Step.forward_ns on CUDA: the GPU's time between two events around the forward and the pick,
    # so at least those kernels' time (idle gaps between them included) and within the step.
    steps = [e for e in events if isinstance(e, Step) and e.kind == "decode"][: ev.steps]
    forward_ms = sorted(s.forward_ns / 1e6 for s in steps)[len(steps) // 2]
    compute_ms = sorted(s.compute_ns / 1e6 for s in steps)[len(steps) // 2]
    kernels = sum(v for k, v in ev.gpu_ms.items() if k != "host_read")
    if not 0.9 * kernels <= forward_ms <= 1.05 * compute_ms:
        raise Failed(
            "forward_ns (CUDA events) against the kernels and the step", f"{forward_ms:.3f} ms", f"{kernels:.3f} ms of kernels to {compute_ms:.3f} ms a step"
        )
    # The GPU's busy time a step (the union of its kernels, copies and fills) is at most their sum,
    # and busy + idle within the profiled step's host range, which kernel_gaps reads them in (not
    # Step.compute_ns: on an H200, 98.7 ms against the profiled range's 113 ms, 2026-11-28).
    if not 0 < ev.gpu_busy_ms <= device_ms / ev.steps * 1.01 or ev.gpu_busy_ms + ev.gpu_idle_ms > 1.05 * ev.step_ms:
        raise Failed(
            "the GPU's busy and idle time a step",
            f"busy {ev.gpu_busy_ms:.3f} ms, idle {ev.gpu_idle_ms:.3f} ms",
            f"kernels, copies and fills {device_ms / ev.steps:.3f} ms, profiled step {ev.step_ms:.3f} ms",
        )
    by_part = ", ".join(f"{k} {v:.3f}" for k, v in ev.gpu_ms.items())
    figure = (
        f"{ev.steps} steps, host {ev.step_ms:.2f} ms a step, forward_ns {forward_ms:.3f} ms, GPU by part {by_part} ms; "
        f"GPU busy {ev.gpu_busy_ms:.3f} ms, idle between kernels {ev.gpu_idle_ms:.3f} ms"
    )
    return figure, f"the trace's kernel events ({kernels_ms:.1f} ms over the window)"
