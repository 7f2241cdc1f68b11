"""What a session's numbers say: the sentences and derived figures every reader shows (the status
bar, the panes, the headless lines, the report), computed from a Session's state. No Textual."""

from __future__ import annotations

import math
from typing import NamedTuple

from monitors.events import AllocatorHistory, Anatomy, Bandwidth, RunFinished, ServerSample
from monitors.leaks import LeakVerdict
from monitors.timing import TimingStats, mean


def read_rate(session) -> tuple[float, float] | None:
    """(bytes/s, fraction of the measured read rate) that the last READ_WINDOW decode steps read
    memory at: each step reads the current weights once (Bandwidth.weight_bytes) and the KV
    cache at its length (Step.kv_bytes, every sequence of the batch), over the steps' own
    intervals (Step.dt_ns, the loop between steps included). A draft model's own reads are not
    counted; a step without the cache re-reads the context through attention, so it reads
    at compute speed, and shows so. None before a measurement or a decode step, or where the
    measurement had nothing to read (every weight under 1 MiB)."""
    if session.bandwidth is None or session.bandwidth.read_bps <= 0 or not session.reads:  # <= 0: nothing to read (a tiny model)
        return None
    ns = sum(dt for _, dt, _ in session.reads)
    if ns <= 0:
        return None
    rate = sum(b for b, _, _ in session.reads) / ns * 1e9
    return rate, rate / session.bandwidth.read_bps


def memory_budget(session) -> tuple[str, int, list[tuple[str, int]]] | None:
    """Where the engine's memory is, live: (whole's name, its bytes, its parts). On a GPU the
    device's, from NVML's count of the process: the weights in use (their bytes, as the engine
    reads them), the KV cache (its tensors' bytes, measured), activations and workspace (torch
    allocated − both), the allocator's cache (reserved − allocated) and outside torch (NVML −
    reserved: the CUDA context, graphs' pools). On a CPU the process's RSS: weights in use, KV,
    and the rest (other copies of the weights, Python, libraries, activations, free heap). None
    before the engine's first sample, or for a server (its memory is not ours to split)."""
    r, samples = session.ready, session.samples
    if r is None or r.server or not samples:
        return None
    last = samples[-1]
    weights = session.bandwidth.weight_bytes if session.bandwidth is not None else r.weight_bytes
    running = session.current is not None and session.current.finished is None
    kv = (session.kv[-1].alloc or session.kv[-1].measured) if running and session.kv else 0  # freed at a run's end
    torch_mem = session.torch_mem[-1] if session.torch_mem else None
    if torch_mem is not None and last.gpu_proc_mem is not None:
        parts = [
            ("weights", weights),
            ("KV", kv),
            ("activations", torch_mem.allocated - weights - kv),
            ("cache", torch_mem.reserved - torch_mem.allocated),
            ("outside torch", last.gpu_proc_mem - torch_mem.reserved),
        ]
        return "GPU engine", last.gpu_proc_mem, parts
    if last.engine_rss is None:
        return None
    return "engine", last.engine_rss, [("weights", weights), ("KV", kv), ("rest", last.engine_rss - weights - kv)]


def budget_text(budget: tuple[str, int, list[tuple[str, int]]], whole: bool = True) -> str:
    """ "engine 983 MiB (weights 514 + KV 2 + rest 467)", or the parts alone; MiB. A part below 0
    (figures read moments apart) shows as it is."""
    name, total, parts = budget
    split = "(" + " + ".join(f"{part} {n / 2**20:.0f}" for part, n in parts) + ")"
    return f"{name} {total / 2**20:.0f} MiB {split}" if whole else split


def device_leak(session) -> tuple[str, LeakVerdict] | None:
    """The device-memory source nearest a leak: a suspected one first, else the highest lower
    bound of a slope. None off CUDA (no run reported device memory)."""
    if not session.device_verdicts:
        return None
    return max(session.device_verdicts.items(), key=lambda kv: (kv[1].status == "suspected", -math.inf if math.isnan(kv[1].low) else kv[1].low))


def device_leak_text(session) -> str | None:
    found = device_leak(session)
    if found is None:
        return None
    name, verdict = found
    return f"GPU {verdict.text()}" + ("" if verdict.status == "collecting" else f" in {name}")


def comparison(session) -> list[str]:
    """Each attached server against the first: its mean TTFT, mean ITL p50 and mean tok/s over
    its finished runs ÷ the first server's, with the runs behind each side."""
    by: dict[str, list[TimingStats]] = {label: [] for label in session.servers}
    for rec in session.timer.runs.values():
        label = rec.started.levers.server
        if rec.finished is not None and rec.finished.stop_reason in ("eos", "max tokens") and label in by:
            by[label].append(rec.total)
    labels = [k for k, v in by.items() if v]
    if len(session.servers) < 2 or len(labels) < 2 or labels[0] != next(iter(session.servers)):
        return []
    base = by[labels[0]]

    def ratio(runs, pick) -> str:
        a, b = mean([pick(s) for s in base]), mean([pick(s) for s in runs])
        return f"{b / a:.2f}" if a and not math.isnan(a) and not math.isnan(b) else "–"

    return [
        f"{label} ÷ {labels[0]}: TTFT {ratio(runs, lambda s: s.ttft_s)}, ITL p50 {ratio(runs, lambda s: s.itl.p50)}, "
        f"tok/s {ratio(runs, lambda s: s.decode_tps)} ({len(runs)} ÷ {len(base)} runs)"
        for label, runs in ((k, by[k]) for k in labels[1:])
    ]


def stall_note(per_token_s: float, latest: ServerSample | None) -> str:
    """A server's stalled token, with what the server said at that moment (its latest scrape)."""
    said = []
    if latest is not None:
        v = latest.values
        if (v.get("waiting") or 0) > 0:
            said.append(f"waiting {v['waiting']:.0f}")
        if (v.get("kv_usage") or 0) >= 0.95:
            said.append(f"KV {v['kv_usage'] * 100:.0f}%")
        if (v.get("preemptions") or 0) > 0:
            said.append("preempting")
    return f"stall {per_token_s * 1000:.0f}ms" + (f": {', '.join(said)}" if said else "")


def end_note(fin: RunFinished) -> str:
    """The output's comparison, after why the run ended when that was not its token limit: a run
    that stops early (EOS, a full context, an error, `r`) must say so, not look complete."""
    return fin.diff_note if fin.stop_reason == "max tokens" else f"{fin.stop_reason} · {fin.diff_note}"


def short_value(value) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def history_text(ev: AllocatorHistory) -> tuple[str, str]:
    """The allocator history's state, long and short: recording (runs left), saved (its path) or not."""
    last = ev.first_run + ev.runs - 1
    runs = f"run {ev.first_run}" if ev.runs == 1 else f"runs {ev.first_run}-{last}"
    if ev.left > 0:
        return f"CUDA allocator history: recording {runs}, {ev.left} to go", f"CUDA history: {ev.left} runs to go"
    if ev.error:
        return f"CUDA allocator history of {runs} not saved: {ev.error}", "CUDA history not saved"
    return f"CUDA allocator history of {runs}: {ev.path} (PyTorch's memory viewer opens it: https://pytorch.org/memory_viz)", f"CUDA history: {ev.path}"


PART_LABELS = {
    "embedding": "embedding",
    "attention": "attention (projections, attention op, KV write)",
    "mlp": "MLP",
    "norms": "norms",
    "lm_head": "LM head",
    "sampling": "sampling (picking the token)",
    "host_read": "device→host read of the token",
    "framework": "framework (outside every part)",
}


def anatomy_lines(ev: Anatomy, width: int = 30) -> list[str]:
    """The anatomy of a step as a table: a row per part with its ms a step, its share and a bar;
    on CUDA the GPU's kernel time beside."""
    gpu = bool(ev.gpu_ms)
    head = f"anatomy of run {ev.run_id}: {ev.steps} decode steps ({ev.levers.label()}), {ev.step_ms:.2f} ms a step on the host's clock (torch.profiler)"
    lines = [head, f"  {'part':<48} {'ms/step':>8} {'share':>6}" + (f" {'GPU ms':>7}" if gpu else "")]
    for part, ms in ev.parts.items():
        share = ms / ev.step_ms if ev.step_ms > 0 else 0.0
        bar = "█" * round(share * width)
        row = f"  {PART_LABELS.get(part, part):<48} {ms:>8.3f} {share:>6.0%}"
        row += f" {ev.gpu_ms[part]:>7.3f}" if gpu and part in ev.gpu_ms else (" " * 8 if gpu else "")
        lines.append(f"{row} {bar}")
    if ev.gpu_busy_ms or ev.gpu_idle_ms:
        lines.append(f"  {gpu_gaps_text(ev)}")
    lines.append(f"  {trace_text(ev)}")
    return lines


LAUNCH_BOUND = 0.25  # a share of the kernels' span the GPU sits idle from which launches pace the step


def gpu_gaps_text(ev: Anatomy) -> str:
    span = ev.gpu_busy_ms + ev.gpu_idle_ms
    share = ev.gpu_idle_ms / span if span > 0 else 0.0
    text = f"GPU: kernels {ev.gpu_busy_ms:.3f} ms a step, idle {ev.gpu_idle_ms:.3f} ms between them ({share:.0%} of their span)"
    return text + ("; the GPU waits on the host's launches: CUDA graphs (compile) help" if share >= LAUNCH_BOUND else "")


def trace_text(ev: Anatomy) -> str:
    return f"trace not written: {ev.trace_error}" if ev.trace_error else f"trace: {ev.trace} (Perfetto's UI or chrome://tracing opens it)"


def anatomy_table(anatomies: list[Anatomy]) -> list[tuple[str, list[tuple[float, float]]]]:
    """Rows of the anatomies side by side: (part's label, [(ms a step, share) per anatomy]); a part
    one of them lacks (a compiled graph's, the modules' under compile) is 0 there."""
    parts: list[str] = []
    for ev in anatomies:
        parts += [p for p in ev.parts if p not in parts]
    parts.sort(key=lambda p: p == "framework")  # framework last, the rest as they came
    rows = []
    for part in parts:
        cells = [(ev.parts.get(part, 0.0), ev.parts.get(part, 0.0) / ev.step_ms if ev.step_ms > 0 else 0.0) for ev in anatomies]
        rows.append((PART_LABELS.get(part, part), cells))
    return rows


OVERHEAD_BOUND = 0.40  # a share of the step outside torch's ops from which the host is the wall, whatever the bytes
MEMORY_BOUND = 0.60  # a share of the read ceiling from which the bytes are the wall
# Ops this short each do little work: a step of many of them is paced by issuing them (the
# dispatcher, the Python around each), which fusing them (compile) removes. Measured here: an add
# of 16 floats takes 1.2 µs; the ops of a 16-wide Llama's step average 8.5 µs, the default model's
# about 160 µs (the Zen 4 EPYC, one thread).
OP_FLOOR_US = 20.0


class Roofline(NamedTuple):
    text: str  # the verdict, in one line
    outside: float  # the step's share outside torch's ops
    step_bytes: int | None  # what a step must read: the weights and the KV cache
    frac: float | None  # step_bytes ÷ the step's time, as a share of the read ceiling
    wall: str = ""  # "overhead", "memory", "neither" or "not overhead" (no read ceiling to weigh)
    experts: float | None = None  # an MoE's: the distinct (layer, expert) pairs a decode step of the run read, on average

    def short(self) -> str:
        """The verdict in a runs table's cell."""
        return self.wall if self.frac is None or self.wall == "overhead" else f"{self.wall} {self.frac:.0%} read"


def roofline(ev: Anatomy, step_s: float, step_bytes: int | None, read_bps: float | None, dram_pct: float | None = None) -> Roofline:
    """Which wall a decode step of `step_s` (unprofiled: the profiler's own work lies between the
    ops) is against: overhead (its share outside torch's ops, whose time the anatomy measured),
    memory (the bytes a step must read ÷ its time, against the read rate the `m` probe measured;
    on a GPU with NVML's GPM, the DRAM bandwidth it measured in use over the run instead), or
    neither (the ops are slow for their bytes). FLOPs are not weighed: no peak is known here."""
    outside = max(0.0, 1 - ev.ops_ms / 1000 / step_s) if step_s > 0 else 0.0
    frac = None
    mem = "no read ceiling measured for these weights (m measures it)"
    if dram_pct is not None:
        frac = dram_pct / 100
        mem = f"the GPU's DRAM bandwidth {dram_pct:.0f}% in use over the run (NVML GPM)" + (f", {step_bytes / 2**20:.0f} MiB a step read" if step_bytes else "")
    elif step_bytes and read_bps and step_s > 0:
        frac = step_bytes / step_s / read_bps
        mem = f"{step_bytes / 2**20:.0f} MiB a step read at {frac:.0%} of the read ceiling ({read_bps / 1e9:.1f} GB/s, the m probe)"
    op_us = ev.ops_ms * 1000 / ev.ops if ev.ops else math.inf
    if outside >= OVERHEAD_BOUND or op_us < OP_FLOOR_US:
        wall = "overhead"
    else:
        wall = "not overhead" if frac is None else "memory" if frac >= MEMORY_BOUND else "neither"
    if outside >= OVERHEAD_BOUND:
        text = f"overhead-bound: {outside:.0%} of the step is Python outside torch's ops (compile, CUDA graphs or a fused step help); {mem}"
    elif op_us < OP_FLOOR_US:
        text = (
            f"overhead-bound: {ev.ops:.0f} ops a step of {op_us:.0f} µs each, too short to be work, and {outside:.0%} outside them "
            f"(compile, CUDA graphs or a fused step help); {mem}"
        )
    elif frac is not None and frac >= MEMORY_BOUND:
        text = f"memory-bound: {mem}; fewer bytes help (int8, int4, a smaller model)"
    elif frac is None:
        text = f"not overhead-bound ({outside:.0%} of the step outside torch's ops); {mem}"
    else:
        text = f"neither wall: {mem}, {outside:.0%} of the step outside torch's ops; the ops are slow for the bytes they read (their kernels, or compute)"
    return Roofline(text, outside, step_bytes, frac, wall)


def mlp_experts(ev: Anatomy, verdict: Roofline | None, bw: Bandwidth | None, routing: dict | None) -> str:
    """An MoE's MLP in the anatomy: the experts its run's decode steps read, by the routing's count
    (not one token's k of n), their bytes, and the rate at which the MLP's profiled time read them
    (a floor: the router and any shared expert share that time), against the m probe's ceiling.
    "" where the run read no counted experts, the modules are one graph (compile: no MLP part), or
    the weights measured are not the anatomy's (another quantization)."""
    mlp_ms = ev.parts.get("mlp")
    if not (mlp_ms and verdict and verdict.experts and bw and bw.expert_bytes and routing) or bw.quant != ev.levers.quant:
        return ""
    read = verdict.experts * bw.expert_bytes
    rate = read / (mlp_ms / 1000)
    ceiling = f", {rate / bw.read_bps:.1%} of the m probe's {bw.read_bps / 1e9:.1f} GB/s" if bw.read_bps else ""
    total = routing["layers"] * routing["experts"]
    return (
        f"{ev.levers.label()}: the MLP's {mlp_ms:.2f} ms a step read {verdict.experts:.1f} of {total} experts "
        f"({read / 2**20:.1f} MiB; one token reads {routing['layers'] * routing['top_k']}), at least {rate / 1e9:.2f} GB/s{ceiling}"
    )
