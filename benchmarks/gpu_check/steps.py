"""A step's clocks and host reads on the GPU: TTFT and ITL against CUDA events, and the host reads
and CUDA syncs a token costs under each lever (the token's confidence measured too)."""

from __future__ import annotations

import itertools
import time

from benchmarks.gpu_check.models import Bench
from benchmarks.gpu_check.report import Failed, Skip, agree


class Clock:
    """Marks on a clock of its own: on CUDA, events timed by the GPU; on the CPU, perf_counter (the
    CPU half of the comparison, the same code on the host's clock)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.name = "CUDA events" if self.cuda else "perf_counter"

    def mark(self):
        if not self.cuda:
            return time.perf_counter_ns()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) / 1e6

    def settle(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def check_timing(bench: Bench, req) -> tuple[str, str]:
    """TTFT and inter-token latency as the UI folds them from the events, against a clock's marks
    (CUDA events on a GPU) made as each event reaches the UI's side."""
    from monitors.events import RunStarted, Step
    from monitors.timing import RunTimer, percentile
    from tui_app.commands.bench import apply_levers

    apply_levers(bench.engine, {})
    clock = Clock(bench.engine.device)
    marks: list[tuple[object, object]] = []
    emit = bench.engine.emit

    def mark(ev):
        if isinstance(ev, RunStarted | Step):
            marks.append((ev, clock.mark()))
        emit(ev)

    bench.engine.emit = mark
    try:
        bench.run(req)
        bench.run(req)  # warm: the first run on a device builds kernels
        marks.clear()
        bench.run(req)
    finally:
        bench.engine.emit = emit
    clock.settle()
    timer = RunTimer()
    record = None
    for ev, _ in marks:
        if isinstance(ev, RunStarted):
            record = timer.started(ev)
        elif isinstance(ev, Step):
            timer.step(ev)
    if record is None or len(marks) < 3:
        raise Failed(f"{len(marks)} events marked: no run")
    ttft, ttft_r = agree(record.total.ttft_s * 1e3, clock.ms(marks[0][1], marks[1][1]), 0.1, 0.2, " ms", "TTFT")
    # A step's interval on the reference clock spans its own dt plus the host's work between steps (events, bookkeeping).
    gaps = [clock.ms(a[1], b[1]) for a, b in itertools.pairwise(marks[1:]) if isinstance(b[0], Step) and b[0].kind == "decode"]
    itl = [s * 1e3 for s in record.total.itl_s]
    p50, p50_ref = agree(percentile(itl, 50), percentile(gaps, 50), 0.1, 0.2, " ms", "ITL p50")
    span = (marks[-1][0].t_ns - marks[1][0].t_ns) / 1e6
    span_f, span_ref = agree(span, clock.ms(marks[1][1], marks[-1][1]), 0.02, 0.2, " ms", "host clock over the run")
    return f"TTFT {ttft}, ITL p50 {p50}, run {span_f}", f"{clock.name}: TTFT {ttft_r}, ITL p50 {p50_ref}, run {span_ref}"


def check_syncs(bench: Bench, combo: dict, req, confidence: bool = False) -> tuple[str, str]:
    """Host reads and CUDA syncs a token; with `confidence`, each token's probability measured too
    (packed into the step's one read: it must add none), each within (0, 1]."""
    from monitors.events import Step
    from monitors.host_reads import count_host_reads
    from tui_app.commands.bench import apply_levers
    from tui_app.requests import Confidence

    refused = apply_levers(bench.engine, combo)
    if refused:
        apply_levers(bench.engine, {})
        raise Skip(f"refused: {refused}")
    bench.engine.command(Confidence(on=confidence))
    try:
        bench.run(req)  # warm: a first run may compile or build
        with count_host_reads(cuda=bench.engine.device.startswith("cuda")) as n:
            tokens, events = bench.run(req)
    finally:
        apply_levers(bench.engine, {})
        bench.engine.command(Confidence(on=False))
    probs = [p for e in events if isinstance(e, Step) for p in e.confidence]
    if confidence and (len(probs) != len(tokens) or not all(0 < p <= 1 for p in probs)):
        raise Failed("each token's confidence not measured in (0, 1]", f"{len(probs)} of {len(tokens)} tokens, {probs[:4]}…")
    reads, syncs = n.per_token(len(tokens))
    # Without a cache each full forward runs transformers' packed-sequence check on the position
    # ids (masking_utils.find_packed_sequence_indices), a read of its own, as the CPU's test
    # (tests/engine/test_host_reads.py) allows; with an attention mask instead, its all-ones
    # check reads as much (masking_utils.fast_all).
    target = 2 if combo.get("cache") is False else 1
    why = " (transformers' packed-sequence check without a cache)" if target == 2 else ""
    reference = f"{reads:.2f} host reads/token (the CPU's count), target ≤ {target}{why}"
    if syncs is None:  # off CUDA: the host reads are what each would be a sync on a GPU
        figure = f"{reads:.2f} host reads/token, no CUDA here"
        if reads > target:
            raise Failed(f"more than {target} host reads per token", figure, f"target ≤ {target}{why}")
        return figure, f"target ≤ {target}{why}"
    figure = f"{syncs:.2f} CUDA syncs/token" + (f" ({n.sites_text()})" if n.sync_sites else "")
    if syncs > target:
        raise Failed(f"more than {target} CUDA syncs per token", figure, reference)
    return figure, reference
