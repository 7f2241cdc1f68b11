"""A session's state, folded from the event stream: the one place the TUI, the headless runner
and replay get their numbers from. No Textual here; every history is a ring buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from monitors.events import (
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
    Step,
    TorchMemory,
)
from monitors.kvcache import kv_formula_bytes
from monitors.leaks import LeakDetector, LeakVerdict
from monitors.record import Recorder
from monitors.timing import RunRecord, RunTimer, TimingStats

HISTORY = 4000
# Phases that legitimately raise the memory baseline (new weights, graphs, a draft model).
PREPARATION_PHASES = ("load", "quantize", "compile", "draft")


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

    @property
    def label(self) -> str:
        return f"{self.run_id}" if self.segment is None else f"{self.run_id}.{self.segment}"


@dataclass
class Session:
    recorder: Recorder | None = None
    history: int = HISTORY
    ready: EngineReady | None = None
    levers: Levers = field(default_factory=Levers)
    phase: Phase | None = None
    timer: RunTimer = field(default_factory=RunTimer)
    leak: LeakDetector = field(default_factory=LeakDetector)
    gpu_leak: LeakDetector = field(default_factory=LeakDetector)
    latency: deque = field(init=False)
    kv: deque = field(init=False)
    markers: deque = field(default_factory=lambda: deque(maxlen=200))
    run_marks: deque = field(default_factory=lambda: deque(maxlen=200))  # t_ns of run ends, for the memory chart
    messages: deque = field(default_factory=lambda: deque(maxlen=50))
    torch_mem: deque = field(init=False)
    samples: deque = field(init=False)
    finished_ids: deque = field(default_factory=lambda: deque(maxlen=1000))
    current: RunRecord | None = None
    verdict: LeakVerdict | None = None
    gpu_verdict: LeakVerdict | None = None
    token_count: int = 0
    fatal: str | None = None
    died: dict = field(default_factory=dict)  # run id → why it never finished
    listeners: list = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("latency", "kv", "torch_mem", "samples"):
            setattr(self, name, deque(maxlen=self.history))

    def feed(self, ev: Event) -> None:
        if self.recorder is not None:
            self.recorder.write(ev)
        if isinstance(ev, Step):
            self._step(ev)
        elif isinstance(ev, Sampled):
            self.samples.append(ev)
        elif isinstance(ev, RunStarted):
            self.levers = ev.levers
            self.current = self.timer.started(ev)
            self.markers.append(Marker(self.token_count, ev.t_ns, f"run {ev.run_id}"))
        elif isinstance(ev, RunFinished):
            self.timer.finished(ev)
            self.finished_ids.append(ev.run_id)
            self.run_marks.append(ev.t_ns)
            self.verdict = self.leak.add(ev.baseline_rss)
            if ev.gpu_baseline is not None:
                self.gpu_verdict = self.gpu_leak.add(ev.gpu_baseline)
        elif isinstance(ev, LeverChanged):
            self.levers = ev.levers
            if ev.run_id is not None:
                self.timer.lever_changed(ev.run_id, ev.segment, ev.levers)
                self.markers.append(Marker(self.token_count, ev.t_ns, f"{ev.lever}={short_value(ev.value)}"))
            self.say(f"{ev.lever} → {short_value(ev.value)}")
        elif isinstance(ev, LeverRefused):
            self.say(f"{ev.lever} {short_value(ev.value)} refused: {ev.reason}", error=True)
        elif isinstance(ev, Phase):
            self.phase = ev
            self.timer.phase(ev)
            if ev.done and ev.name in PREPARATION_PHASES:
                self.leak.reset()
                self.gpu_leak.reset()
                self.verdict = self.gpu_verdict = None
            if ev.done:
                self.say(f"{ev.name}: {ev.detail} ({ev.seconds:.1f} s)")
        elif isinstance(ev, EngineReady):
            self.ready = ev
            self.phase = None
        elif isinstance(ev, TorchMemory):
            self.torch_mem.append(ev)
        elif isinstance(ev, EngineError):
            if ev.fatal:
                self.fatal = ev.message
            self.say(ev.message, error=True)
        for fn in self.listeners:
            fn(ev)

    def engine_died(self, message: str) -> None:
        self.fatal = message
        if self.current is not None and self.current.finished is None:
            self.died[self.current.started.run_id] = "engine died"

    def say(self, text: str, error: bool = False) -> None:
        self.messages.append((error, text))

    def _step(self, ev: Step) -> None:
        self.timer.step(ev)
        if ev.kind in ("prefill", "reprefill"):
            self.latency.append(TokenPoint(self.token_count, ev.dt_ns / 1e9, ev.kind, ev.run_id))
        else:
            per = ev.dt_ns / 1e9 / max(ev.n_tokens, 1)
            for k in range(ev.n_tokens):
                self.latency.append(TokenPoint(self.token_count + k, per, ev.kind, ev.run_id))
        self.token_count += ev.n_tokens
        if self.ready is not None:
            # Events arrive in order, so self.levers is the setting this step ran with.
            r = self.ready
            formula = kv_formula_bytes(r.kv_bytes_per_elem, self.levers.batch, ev.seq_len, r.n_layers, r.kv_heads, r.head_dim) if ev.kv_bytes else 0
            self.kv.append(KVPoint(ev.seq_len, ev.kv_bytes, formula, ev.kv_alloc_bytes))

    def rows(self, limit: int = 200) -> list[Row]:
        out: list[Row] = []
        for rid in list(self.timer.runs)[-limit:]:
            rec = self.timer.runs[rid]
            note = rec.finished.diff_note if rec.finished else self.died.get(rid, "running")
            out.append(Row(rid, None, rec.total, rec.finished, note))
            if len(rec.segments) > 1:
                out.extend(Row(rid, i, seg, None) for i, seg in enumerate(rec.segments) if seg.n_tokens)
        return out

    def trim(self, keep_runs: int = 500) -> None:
        """Bound the per-run records too (auto-repeat can run for hours)."""
        runs = self.timer.runs
        while len(runs) > keep_runs:
            runs.pop(next(iter(runs)))


def short_value(value) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)
