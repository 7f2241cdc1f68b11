"""A session's state, folded from the event stream: the one place the TUI, the headless runner
and replay get their numbers from. No Textual here; every history is a ring buffer.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from itertools import islice

from monitors.events import (
    Bandwidth,
    EngineError,
    EngineReady,
    Event,
    LeverChanged,
    LeverRefused,
    Levers,
    Phase,
    RunFinished,
    RunStarted,
    Sampled,
    ServerSample,
    Step,
    TorchMemory,
)
from monitors.kvcache import kv_formula_bytes
from monitors.leaks import LeakDetector, LeakVerdict
from monitors.record import Recorder
from monitors.timing import RunRecord, RunTimer, TimingStats, mean
from monitors.xray import XrayBook

HISTORY = 4000
STALL, STALL_MIN_S = 4.0, 0.02  # a server token this much later than its run's median is a stall
READ_WINDOW = 32  # decode steps behind the live memory read rate: half a second at the default model's pace
READ_FRESH_NS = 1_000_000_000  # a sample this long after the last decode step shows no read rate
RAN_TO_END = ("max tokens", "eos", "context full")
# Phases that legitimately raise the memory baseline (new weights, graphs, a draft model).
PREPARATION_PHASES = ("load", "quantize", "compile", "draft")
# The device memory a run leaves behind, by source (RunFinished's fields): a tensor kept by
# mistake shows in the allocator's figures; a CUDA-graph pool or a context's growth only in NVML's.
DEVICE_BASELINES = (("torch allocated", "gpu_baseline"), ("torch reserved", "gpu_reserved"), ("NVML process", "gpu_proc_mem"))


@dataclass
class TokenPoint:
    """One point of the latency chart: a token's ITL (or a prefill's duration, marked)."""

    index: int
    seconds: float
    kind: str
    run_id: int


@dataclass
class KVPoint:
    seq_len: int
    measured: int
    formula: int
    alloc: int
    run_id: int = 0


@dataclass
class Marker:
    index: int  # token index in the latency history
    t_ns: int
    label: str


@dataclass
class Row:
    """One line of the runs table: a run, or one lever segment of a run."""

    run_id: int
    segment: int | None
    stats: TimingStats
    finished: RunFinished | None = None
    note: str = ""
    end_levers: Levers | None = None  # a run's levers at its end, where a switch changed them

    @property
    def label(self) -> str:
        return f"{self.run_id}" if self.segment is None else f"{self.run_id}.{self.segment}"

    @property
    def levers_label(self) -> str:
        """The levers the row's numbers come from: a run switched midway shows start→end, since its
        perplexity and output belong to the end levers and its timings to both."""
        start = self.stats.levers.label()
        if self.end_levers is None or self.end_levers == self.stats.levers:
            return start
        return f"{start}→{self.end_levers.label()}"


@dataclass
class Session:
    recorder: Recorder | None = None
    history: int = HISTORY
    ready: EngineReady | None = None
    levers: Levers = field(default_factory=Levers)
    phase: Phase | None = None
    timer: RunTimer = field(default_factory=RunTimer)
    leak: LeakDetector = field(default_factory=LeakDetector)
    device_leaks: dict = field(default_factory=lambda: {name: LeakDetector() for name, _ in DEVICE_BASELINES})
    latency: deque = field(init=False)
    kv: deque = field(init=False)
    markers: deque = field(default_factory=lambda: deque(maxlen=200))
    run_marks: deque = field(default_factory=lambda: deque(maxlen=200))  # t_ns of run ends, for the memory chart
    messages: deque = field(default_factory=lambda: deque(maxlen=50))
    torch_mem: deque = field(init=False)
    samples: deque = field(init=False)
    server: deque = field(init=False)  # ServerSample: an attached server's own figures
    bandwidth: Bandwidth | None = None  # the current weights' bytes and the measured rate of reading them
    reads: deque = field(default_factory=lambda: deque(maxlen=READ_WINDOW))  # (bytes read, dt_ns, t_ns) of recent decode steps
    mem_read: deque = field(init=False)  # per sample: the read rate's fraction of the measured one, or None
    servers: dict = field(default_factory=dict)  # label → EngineReady of each attached server, in attach order
    finished_ids: deque = field(default_factory=lambda: deque(maxlen=1000))
    current: RunRecord | None = None
    verdict: LeakVerdict | None = None
    device_verdicts: dict = field(default_factory=dict)  # source name → LeakVerdict, for the sources a run reported
    token_count: int = 0
    sample_count: int = 0  # Sampled events so far: the index of the next, for charts that page
    fatal: str | None = None
    died: dict = field(default_factory=dict)  # run id → why it never finished
    listeners: list = field(default_factory=list)
    xray: XrayBook = field(default_factory=XrayBook)  # each server request's client marks and the server's account of it

    def __post_init__(self) -> None:
        for name in ("latency", "kv", "torch_mem", "samples", "server", "mem_read"):
            setattr(self, name, deque(maxlen=self.history))

    def feed(self, ev: Event) -> None:
        if self.recorder is not None:
            self.recorder.write(ev)
        self.xray.feed(ev)
        if isinstance(ev, Step):
            self._step(ev)
        elif isinstance(ev, Sampled):
            self.samples.append(ev)
            self.sample_count += 1
            now = self.read_rate() if self.reads and ev.t_ns - self.reads[-1][2] < READ_FRESH_NS else None
            self.mem_read.append(now[1] if now else None)
        elif isinstance(ev, ServerSample):
            self.server.append(ev)
            if ev.error:
                self.say(ev.error, error=True)
        elif isinstance(ev, RunStarted):
            if self.current is not None and self.current.finished is None:  # runs come one at a time: that one was cut off
                self.died.setdefault(self.current.started.run_id, "did not finish")
            self.levers = ev.levers
            self.reads.clear()
            self.current = self.timer.started(ev)
            self.markers.append(Marker(self.token_count, ev.t_ns, f"run {ev.run_id}"))
        elif isinstance(ev, RunFinished):
            self.timer.finished(ev)
            self.finished_ids.append(ev.run_id)
            self.run_marks.append(ev.t_ns)
            # The trend takes runs that ran to their end: a stopped or failed run's baseline is
            # taken wherever it was cut (under random keys, up to 110 MB above its neighbours).
            # A remote server's memory may be unknown.
            if ev.stop_reason in RAN_TO_END:
                if ev.baseline_rss is not None:
                    self.verdict = self.leak.add(ev.baseline_rss)
                for name, attr in DEVICE_BASELINES:
                    if getattr(ev, attr) is not None:
                        self.device_verdicts[name] = self.device_leaks[name].add(getattr(ev, attr))
        elif isinstance(ev, LeverChanged):
            self.levers = ev.levers
            self.reads.clear()  # other weights or another step: the rate starts again
            if ev.run_id is not None:
                self.timer.lever_changed(ev.run_id, ev.segment, ev.levers)
                self.markers.append(Marker(self.token_count, ev.t_ns, f"{ev.lever}={short_value(ev.value)}"))
            if ev.levers.server and ev.lever == "batch":
                self.say(f"concurrency → {ev.value} streams from the next run")
            else:
                self.say(f"{ev.lever} → {short_value(ev.value)}")
        elif isinstance(ev, LeverRefused):
            self.say(f"{ev.lever} {short_value(ev.value)} refused: {ev.reason}", error=True)
        elif isinstance(ev, Phase):
            self.phase = ev
            self.timer.phase(ev)
            if ev.done and ev.name in PREPARATION_PHASES:
                self.leak.reset()
                for detector in self.device_leaks.values():
                    detector.reset()
                self.verdict = None
                self.device_verdicts.clear()
            if ev.done:
                self.say(f"{ev.name}: {ev.detail} ({ev.seconds:.1f} s)")
        elif isinstance(ev, EngineReady):
            self.ready = ev
            if ev.server:
                self.servers[ev.server.get("label", ev.source)] = ev
            self.phase = None
        elif isinstance(ev, Bandwidth):
            self.bandwidth = ev
            self.reads.clear()
        elif isinstance(ev, TorchMemory):
            self.torch_mem.append(ev)
        elif isinstance(ev, EngineError):
            if ev.fatal:
                self.fatal = ev.message
            self.say(ev.message, error=True)
        for fn in self.listeners:
            fn(ev)

    def engine_died(self, message: str, why: str = "engine died") -> None:
        self.fatal = message
        if self.current is not None and self.current.finished is None:
            self.died[self.current.started.run_id] = why

    @property
    def next_run_id(self) -> int:
        """The id after every run seen, for an engine that starts again (its own count starts at 1)."""
        return max([*self.timer.runs, *self.finished_ids, 0]) + 1

    def say(self, text: str, error: bool = False) -> None:
        self.messages.append((error, text))

    def _step(self, ev: Step) -> None:
        self.timer.step(ev)
        if self.levers.server and ev.segment:
            return  # the charts follow a server run's first stream; the runs table has every stream
        if ev.kind in ("prefill", "reprefill"):
            self.latency.append(TokenPoint(self.token_count, ev.dt_ns / 1e9, ev.kind, ev.run_id))
        else:
            per = ev.dt_ns / 1e9 / max(ev.n_tokens, 1)
            if self.levers.server:
                self._mark_stall(ev, per)
            elif self.bandwidth is not None:
                self.reads.append((self.bandwidth.weight_bytes + ev.kv_bytes, ev.dt_ns, ev.t_ns))
            for k in range(ev.n_tokens):
                self.latency.append(TokenPoint(self.token_count + k, per, ev.kind, ev.run_id))
        self.token_count += ev.n_tokens
        if self.ready is not None:
            # Events arrive in order, so self.levers is the setting this step ran with.
            r = self.ready
            formula = kv_formula_bytes(r.kv_bytes_per_elem, self.levers.batch, ev.seq_len, r.n_layers, r.kv_heads, r.head_dim) if ev.kv_bytes else 0
            self.kv.append(KVPoint(ev.seq_len, ev.kv_bytes, formula, ev.kv_alloc_bytes, ev.run_id))

    def device_leak(self) -> tuple[str, LeakVerdict] | None:
        """The device-memory source nearest a leak: a suspected one first, else the highest lower
        bound of a slope. None off CUDA (no run reported device memory)."""
        if not self.device_verdicts:
            return None
        return max(self.device_verdicts.items(), key=lambda kv: (kv[1].status == "suspected", -math.inf if math.isnan(kv[1].low) else kv[1].low))

    def device_leak_text(self) -> str | None:
        found = self.device_leak()
        if found is None:
            return None
        name, verdict = found
        return f"GPU {verdict.text()}" + ("" if verdict.status == "collecting" else f" in {name}")

    def read_rate(self) -> tuple[float, float] | None:
        """(bytes/s, fraction of the measured read rate) that the last READ_WINDOW decode steps read
        memory at: each step reads the current weights once (Bandwidth.weight_bytes) and the KV
        cache at its length (Step.kv_bytes, every sequence of the batch), over the steps' own
        intervals (Step.dt_ns, the loop between steps included). A draft model's own reads are not
        counted; a step without the cache re-reads the context through attention, so it reads
        at compute speed, and shows so. None before a measurement or a decode step, or where the
        measurement had nothing to read (every weight under 1 MiB)."""
        if self.bandwidth is None or self.bandwidth.read_bps <= 0 or not self.reads:  # <= 0: nothing to read (a tiny model)
            return None
        ns = sum(dt for _, dt, _ in self.reads)
        if ns <= 0:
            return None
        rate = sum(b for b, _, _ in self.reads) / ns * 1e9
        return rate, rate / self.bandwidth.read_bps

    def _mark_stall(self, ev: Step, per_token_s: float) -> None:
        """A server's token far later than its run's usual (STALL × the median of the last 32, and
        STALL_MIN_S more) is marked on the latency chart with what the server said at that moment."""
        if per_token_s < STALL_MIN_S:  # most tokens: no stall possible, and nothing to look at
            return
        recent = [p.seconds for p in islice(reversed(self.latency), 32) if p.run_id == ev.run_id and p.kind == "decode"]
        if len(recent) < 8:
            return
        median = sorted(recent)[len(recent) // 2]
        if per_token_s < STALL * median or per_token_s - median < STALL_MIN_S:
            return
        said = []
        latest = next((x for x in reversed(self.server) if not x.error), None)
        if latest is not None:
            v = latest.values
            if (v.get("waiting") or 0) > 0:
                said.append(f"waiting {v['waiting']:.0f}")
            if (v.get("kv_usage") or 0) >= 0.95:
                said.append(f"KV {v['kv_usage'] * 100:.0f}%")
            if (v.get("preemptions") or 0) > 0:
                said.append("preempting")
        label = f"stall {per_token_s * 1000:.0f}ms" + (f": {', '.join(said)}" if said else "")
        self.markers.append(Marker(self.token_count, ev.t_ns, label))

    def active_server(self) -> dict | None:
        """The attached server runs go to now (its EngineReady.server), or None for the engine."""
        ready = self.servers.get(self.levers.server, self.ready)
        return ready.server if ready is not None else None

    def comparison(self) -> list[str]:
        """Each attached server against the first: its mean TTFT, mean ITL p50 and mean tok/s over
        its finished runs ÷ the first server's, with the runs behind each side."""
        by: dict[str, list[TimingStats]] = {label: [] for label in self.servers}
        for rec in self.timer.runs.values():
            label = rec.started.levers.server
            if rec.finished is not None and rec.finished.stop_reason in ("eos", "max tokens") and label in by:
                by[label].append(rec.total)
        labels = [k for k, v in by.items() if v]
        if len(self.servers) < 2 or len(labels) < 2 or labels[0] != next(iter(self.servers)):
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

    def rows(self, limit: int = 200) -> list[Row]:
        out: list[Row] = []
        for rid in list(self.timer.runs)[-limit:]:
            rec = self.timer.runs[rid]
            note = end_note(rec.finished) if rec.finished else self.died.get(rid, "running")
            out.append(Row(rid, None, rec.total, rec.finished, note, rec.segments[-1].levers))
            if len(rec.segments) > 1:
                out.extend(Row(rid, i, seg, None) for i, seg in enumerate(rec.segments) if seg.n_tokens)
        return out

    def trim(self, keep_runs: int = 500) -> None:
        """Bound the per-run records too (auto-repeat can run for hours)."""
        runs = self.timer.runs
        while len(runs) > keep_runs:
            runs.pop(next(iter(runs)))


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
