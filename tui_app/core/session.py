"""A session's state, folded from the event stream: the one place the TUI, the headless runner
and replay get their numbers from. No Textual here; every history is a ring buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import islice

from monitors.codec import Event
from monitors.events import (
    AllocatorHistory,
    Anatomy,
    Bandwidth,
    EngineError,
    EngineReady,
    ExpertLoad,
    FleetReady,
    FleetSample,
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
from monitors.phases import ANSWER
from monitors.record import Recorder
from monitors.routing import LoadBook, step_weight_bytes
from monitors.timing import DETAIL_VALUES, RunRecord, RunTimer, TimingStats
from monitors.xray import XrayBook
from tui_app.core.batch_view import cached_tokens
from tui_app.core.energy import EnergyBook, per_token
from tui_app.core.readings import Roofline, end_note, history_text, read_rate, roofline, short_value, stall_note

HISTORY = 4000
ANATOMIES = 4  # lever mixes whose step anatomies stand side by side
STALL, STALL_MIN_S = 4.0, 0.02  # a server token this much later than its run's median is a stall
READ_WINDOW = 32  # decode steps behind the live memory read rate: half a second at the default model's pace
READ_FRESH_NS = 1_000_000_000  # a sample this long after the last decode step shows no read rate
SLOWED_GAP_NS = 2_000_000_000  # a longer gap between samples (the sampler stalled) counts as this much
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
    roofline: Roofline | None = None  # the verdict of the anatomy taken in the run, if one was
    slowed_s: float = 0.0  # seconds of the run its GPUs' clocks were held down (power cap, thermal, ...)
    energy_j: float | None = None  # its energy counter's rise over the run's span, power taken as even between samples
    energy_source: str = ""  # whose counter: the GPUs' or the CPU packages' (core/energy.py)
    cache_note: str = ""  # RunStarted's: why a watched script's run has no KV cache
    energy_reason: str = ""  # without a counter's figure, why not (the last sample's word)

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

    @property
    def j_per_token(self) -> float | None:
        return per_token(self.energy_j, self.stats)


@dataclass
class Session:
    recorder: Recorder | None = None
    history: int = HISTORY
    ready: EngineReady | None = None
    levers: Levers = field(default_factory=Levers)
    phase: Phase | None = None
    prepared: dict = field(default_factory=dict)  # a finished phase's name → its last detail (what quantize says it built)
    one_time: dict = field(default_factory=dict)  # a lever setting (Phase.cost_of) → (seconds, phases, graph breaks) preparing it
    prepared_for: dict = field(default_factory=dict)  # a lever setting → its last phase's detail
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
    anatomy: Anatomy | None = None  # the last window of profiled decode steps (the p key, --profile-steps)
    anatomies: dict = field(default_factory=dict)  # lever mix's label → its last Anatomy, the last ANATOMIES mixes
    run_rooflines: dict = field(default_factory=dict)  # run id → the roofline verdict of the anatomy taken in it, at its end
    run_slowed: dict = field(default_factory=dict)  # run id → seconds its GPUs' clocks were held down (NVML's clock events)
    allocator_history: AllocatorHistory | None = None  # the H key's window: recording, or where it was saved
    bandwidth: Bandwidth | None = None  # the current weights' bytes and the measured rate of reading them
    experts: LoadBook = field(default_factory=LoadBook)  # an MoE's routing: the run's counts and its recent loads
    decode_hits: tuple = (0, 0, 0)  # an MoE's: (run id, its decode steps' distinct experts read, summed; those steps)
    reads: deque = field(default_factory=lambda: deque(maxlen=READ_WINDOW))  # (bytes read, dt_ns, t_ns) of recent decode steps
    batch_steps: deque = field(default_factory=lambda: deque(maxlen=READ_WINDOW))  # the current run's last steps of a batch of distinct prompts
    mem_read: deque = field(init=False)  # per sample: the read rate's fraction of the measured one, or None
    servers: dict = field(default_factory=dict)  # label → EngineReady of each attached server, in attach order
    finished_ids: deque = field(default_factory=lambda: deque(maxlen=1000))
    phase_now: str = ANSWER  # the shown stream's phase at its last step
    current: RunRecord | None = None
    verdict: LeakVerdict | None = None
    device_verdicts: dict = field(default_factory=dict)  # source name → LeakVerdict, for the sources a run reported
    token_count: int = 0
    sample_count: int = 0  # Sampled events so far: the index of the next, for charts that page
    fatal: str | None = None
    died: dict = field(default_factory=dict)  # run id → why it never finished
    listeners: list = field(default_factory=list)
    xray: XrayBook = field(default_factory=XrayBook)  # each server request's client marks and the server's account of it
    fleet_ready: FleetReady | None = None  # a fleet read through Prometheus
    fleet: FleetSample | None = None  # its latest refresh: a row per replica
    fleet_history: deque = field(init=False)  # (unix seconds, the fleet's figures), the backfill first
    fleet_error: str = ""  # why the fleet's rows are not fresh (Prometheus unreachable, no replica matches)
    server_busy: bool = False  # --watch: whether the server's last sample found requests running or waiting
    energy: EnergyBook = field(default_factory=EnergyBook)  # the energy counter behind J/token, and each run's share

    def __post_init__(self) -> None:
        for name in ("latency", "kv", "torch_mem", "samples", "server", "mem_read", "fleet_history"):
            setattr(self, name, deque(maxlen=self.history))

    @classmethod
    def from_events(cls, events, history: int = HISTORY) -> Session:
        """The session these events make, as the app saw it live (replay, report, export)."""
        session = cls(history=history)
        for ev in events:
            session.feed(ev)
        if session.current is not None and session.current.finished is None:  # the app was killed, or the disk filled, mid-run
            session.died[session.current.started.run_id] = "the recording ends mid-run"
        return session

    def feed(self, ev: Event) -> None:
        if self.recorder is not None:
            self.recorder.write(ev)
        self.xray.feed(ev)
        if isinstance(ev, Step):
            self._step(ev)
        elif isinstance(ev, Sampled):
            if ev.gpu_slowed and self.samples and self.current is not None and self.current.finished is None:
                rid = self.current.started.run_id  # the time since the last sample, the run's GPUs' clocks held down
                self.run_slowed[rid] = self.run_slowed.get(rid, 0.0) + min(ev.t_ns - self.samples[-1].t_ns, SLOWED_GAP_NS) / 1e9
            self.samples.append(ev)
            self.sample_count += 1
            self.energy.feed(ev, self.token_count, self.current)
            now = read_rate(self) if self.reads and ev.t_ns - self.reads[-1][2] < READ_FRESH_NS else None
            self.mem_read.append(now[1] if now else None)
        elif isinstance(ev, ServerSample):
            self.server.append(ev)
            if ev.error:
                self.say(ev.error, error=True)
            self._idle_baseline(ev)
        elif isinstance(ev, RunStarted):
            if self.current is not None and self.current.finished is None:  # runs come one at a time: that one was cut off
                self.died.setdefault(self.current.started.run_id, "did not finish")
            self.levers = ev.levers
            self.reads.clear()
            self.batch_steps.clear()
            self.current = self.timer.started(ev)
            self.markers.append(Marker(self.token_count, ev.t_ns, f"run {ev.run_id}"))
        elif isinstance(ev, RunFinished):
            self._roofline(ev.run_id)
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
            if ev.done and ev.cost_of:
                spent, n, breaks = self.one_time.get(ev.cost_of, (0.0, 0, 0))
                self.one_time[ev.cost_of], self.prepared_for[ev.cost_of] = (spent + ev.seconds, n + 1, breaks + ev.graph_breaks), ev.detail
            if ev.done:
                self.prepared[ev.name] = ev.detail
                self.say(f"{ev.name}: {ev.detail} ({ev.seconds:.1f} s)")
        elif isinstance(ev, EngineReady):
            self.ready = ev
            if ev.server:
                self.servers[ev.server.get("label", ev.source)] = ev
            self.phase = None
        elif isinstance(ev, Bandwidth):
            self.bandwidth = ev
            self.reads.clear()
        elif isinstance(ev, ExpertLoad):
            self.experts.add(ev)
        elif isinstance(ev, TorchMemory):
            self.torch_mem.append(ev)
        elif isinstance(ev, Anatomy):
            self.anatomy = ev
            label = ev.levers.label()
            self.anatomies.pop(label, None)
            self.anatomies[label] = ev
            # The window's steps were slowed by the profiler: the chart says where they end.
            self.markers.append(Marker(self.token_count, ev.t_ns, f"profiled {ev.steps}"))
            while len(self.anatomies) > ANATOMIES:
                self.anatomies.pop(next(iter(self.anatomies)))
        elif isinstance(ev, AllocatorHistory):
            if ev.left in (0, ev.runs):  # its start and its end; the pane counts the runs between
                self.say(history_text(ev)[0], error=bool(ev.error))
            self.allocator_history = ev
        elif isinstance(ev, EngineError):
            if ev.fatal:
                self.fatal = ev.message
            self.say(ev.message, error=True)
        elif isinstance(ev, (FleetReady, FleetSample)):
            self._fleet(ev)
        for fn in self.listeners:
            fn(ev)

    def _idle_baseline(self, ev: ServerSample) -> None:
        """--watch runs nothing, so a server's memory baseline is taken where its own traffic
        ends instead: its RSS at each sample that finds it idle (nothing running or waiting)
        after one that found it busy, from this host's reading of its process or its own export."""
        server = self.servers.get(ev.server) or self.ready
        if ev.error or server is None or not (server.server or {}).get("watch"):
            return
        busy = bool(ev.values.get("running") or ev.values.get("waiting"))
        was_busy, self.server_busy = self.server_busy, busy
        if busy or not was_busy:
            return
        local = self.samples[-1].engine_rss if self.samples else None
        rss = local if local is not None else ev.values.get("rss")
        if rss is not None:
            self.verdict = self.leak.add(int(rss))

    def _fleet(self, ev: FleetReady | FleetSample) -> None:
        if isinstance(ev, FleetReady):
            self.fleet_ready = ev
            return
        if ev.fleet:
            self.fleet_history.append((ev.ts, ev.fleet))
        if not ev.backfill and ev.rows:
            self.fleet = ev
            self.fleet_error = ""
        if ev.error:
            self.fleet_error = ev.error
        for note in ev.notes:
            self.say(note)
        if ev.error:
            self.say(ev.error, error=True)

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
        if ev.phase != self.phase_now and ev.step > 1:  # a reasoning model's phase boundary, marked on the charts
            self.markers.append(Marker(self.token_count, ev.t_ns, ev.phase))
        self.phase_now = ev.phase
        if ev.kind in ("prefill", "reprefill"):
            self.latency.append(TokenPoint(self.token_count, ev.dt_ns / 1e9, ev.kind, ev.run_id))
        else:
            per = ev.dt_ns / 1e9 / max(ev.n_tokens, 1)
            if self.levers.server:
                self._mark_stall(ev, per)
            elif self.bandwidth is not None:
                self.reads.append((self._weights_read(ev.experts_hit) + ev.kv_bytes, ev.dt_ns, ev.t_ns))
            if ev.experts_hit is not None and ev.kind == "decode":
                run, hits, steps = self.decode_hits if self.decode_hits[0] == ev.run_id else (ev.run_id, 0, 0)
                self.decode_hits = (run, hits + ev.experts_hit, steps + 1)
            for k in range(ev.n_tokens):
                self.latency.append(TokenPoint(self.token_count + k, per, ev.kind, ev.run_id))
        self.token_count += ev.n_tokens
        if self.ready is not None:
            # Events arrive in order, so self.levers is the setting this step ran with.
            r = self.ready
            if ev.batch:  # distinct prompts: the rows' own tokens, each row its own length
                self.batch_steps.append(ev)
                formula = kv_formula_bytes(r.kv_bytes_per_elem, 1, cached_tokens(ev.batch), r.n_layers, r.kv_heads, r.head_dim)
            else:
                formula = kv_formula_bytes(r.kv_bytes_per_elem, self.levers.batch, ev.seq_len, r.n_layers, r.kv_heads, r.head_dim) if ev.kv_bytes else 0
            # A batch's x is its first sequence's length: the padded one shrinks as rows leave.
            x = ev.batch[0][1] + ev.batch[0][2] - 1 if ev.batch else ev.seq_len
            self.kv.append(KVPoint(x, ev.kv_bytes, formula, ev.kv_alloc_bytes, ev.run_id))

    def _weights_read(self, experts_hit: int | None) -> int:
        """The weight bytes a step read: an MoE's, by the distinct experts it touched (monitors/routing.py)."""
        bw = self.bandwidth
        assert bw is not None
        return step_weight_bytes(bw.weight_bytes, bw.expert_bytes, self.ready.routing if self.ready else None, experts_hit)

    def _roofline(self, run_id: int) -> None:
        """The roofline verdict of the anatomy taken in this run, on the run's own decode steps: their
        median interval (the profiled ones, slowed, are the fewer), the bytes a step reads (the
        weights the last measurement read, if of these weights, and the KV cache at the run's end)."""
        ev = next((a for a in self.anatomies.values() if a.run_id == run_id), None)
        if ev is None:  # most runs: no anatomy, and no pass over the latency history
            return
        decode = sorted(p.seconds for p in self.latency if p.run_id == run_id and p.kind == "decode")
        if not decode:
            return
        bw = self.bandwidth if self.bandwidth is not None and self.bandwidth.quant == ev.levers.quant else None
        kv = next((p.measured for p in reversed(self.kv) if p.run_id == run_id), 0)
        since = self.timer.runs[run_id].started.t_ns if run_id in self.timer.runs else ev.t_ns
        dram = [x.gpu_dram_pct for x in self.samples if x.t_ns >= since and x.gpu_dram_pct is not None]
        run, hits, steps = self.decode_hits
        weights = self._weights_read(round(hits / steps) if run == run_id and steps else None) if bw else 0
        step_bytes, read_bps = (weights + kv, bw.read_bps) if bw else (None, None)
        verdict = roofline(ev, decode[len(decode) // 2], step_bytes, read_bps, sum(dram) / len(dram) if dram else None)
        self.run_rooflines[run_id] = verdict._replace(experts=hits / steps if run == run_id and steps else None)

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
        latest = next((x for x in reversed(self.server) if not x.error), None)
        self.markers.append(Marker(self.token_count, ev.t_ns, stall_note(per_token_s, latest)))

    def active_server(self) -> dict | None:
        """The attached server runs go to now (its EngineReady.server), or None for the engine."""
        ready = self.servers.get(self.levers.server, self.ready)
        return ready.server if ready is not None else None

    def rows(self, limit: int = 200) -> list[Row]:
        out: list[Row] = []
        for rid in list(self.timer.runs)[-limit:]:
            rec = self.timer.runs[rid]
            note = end_note(rec.finished) if rec.finished else self.died.get(rid, "running")
            roofline, slowed = self.run_rooflines.get(rid), self.run_slowed.get(rid, 0.0)
            source, energy = self.energy.runs.get(rid, ("", None))
            why = "" if energy is not None else self.energy.reason
            out.append(Row(rid, None, rec.total, rec.finished, note, rec.segments[-1].levers, roofline, slowed, energy, source, rec.started.cache_note, why))
            if len(rec.segments) > 1:
                out.extend(Row(rid, i, seg, None) for i, seg in enumerate(rec.segments) if seg.n_tokens)
        return out

    def trim(self, keep_runs: int = 500, keep_values: int = DETAIL_VALUES) -> None:
        """Bound the per-run records too (auto-repeat can run for hours): by count, and by their
        per-token detail, which a run of many streams has much more of."""
        self.timer.trim(keep_runs, keep_values)
        shown = {ev.run_id for ev in self.anatomies.values()}  # the anatomy screen's verdicts stay
        for book in (self.run_rooflines, self.run_slowed, self.energy.runs):
            for rid in [r for r in book if r not in self.timer.runs and r not in shown]:
                del book[rid]
