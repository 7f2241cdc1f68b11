"""Token-timing statistics computed from the engine's events.

Definitions (the same for the TUI, the benchmark and replay, since all use this module), all on
one clock, the time at which each event was emitted (for a server, a chunk's arrival):
- a step's interval (Step.dt_ns): from the run's previous emission (RunStarted for the first
  step) to the step's own, less the phases (pause, compile, quantize) in between. So everything
  the loop does per token counts, and TTFT + decode time + re-prefill time = end-to-end time.
- TTFT: from RunStarted (prompt tokenized, before the prefill pass) to the prefill step's
  emission (its token sampled, detokenized and sent).
- ITL: per generated token, for decode and speculative-verify steps. A step that yields k tokens
  contributes k intervals of dt/k, so mean ITL × decode tokens = decode time.
  Re-prefill steps (after a lever change) are excluded from ITL and reported as their own time.
- decode tok/s: batch × decode tokens ÷ decode time (throughput over all sequences). A run whose
  batch changed mid-run sums each step's tokens × the batch that step ran with; a batch of
  distinct prompts, every sequence's own tokens as each step counts them (Step.batch_tokens).
- compute tok/s: the same tokens ÷ the decode steps' own work (Step.compute_ns: forward,
  sampling, the host read, not the loop between steps); NaN where the source does not see it.
- end-to-end: from RunStarted to the last step's emission, less the phases inside the run;
  end-to-end tok/s: batch × all new tokens ÷ end-to-end time (the same per-step sum).
- prefill tok/s: batch × prompt tokens ÷ TTFT (distinct prompts: the first step's prompts).
- phases (a reasoning model's: monitors/phases.py): TTFA, the time to the first answer token, from
  RunStarted to the first step of the answer (a run with no thinking: its TTFT); each phase's
  tokens, and its own ITL once a run has more than one phase (the same intervals, by the phase of
  the step that ends each); the thinking share: thinking tokens ÷ new tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from monitors.events import Levers, Phase, RunFinished, RunStarted, Step
from monitors.phases import ANSWER, THINKING


def percentile(values: list[float], q: float, is_sorted: bool = False) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        return math.nan
    xs = values if is_sorted else sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def std(values: list[float]) -> float:
    """Population standard deviation (numpy's default ddof=0)."""
    if not values:
        return math.nan
    m = mean(values)
    return math.sqrt(sum((x - m) ** 2 for x in values) / len(values))


@dataclass
class Summary:
    mean: float
    std: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        if not values:
            nan = math.nan
            return cls(nan, nan, nan, nan, nan, nan, nan, nan, 0)
        xs = sorted(values)  # once, for every percentile
        return cls(
            mean(values),
            std(values),
            xs[0],
            xs[-1],
            percentile(xs, 50, True),
            percentile(xs, 90, True),
            percentile(xs, 95, True),
            percentile(xs, 99, True),
            len(xs),
        )


@dataclass
class TimingStats:
    """Statistics of one run, or of one lever segment within a run."""

    levers: Levers
    batch: int
    prompt_tokens: int
    n_tokens: int = 0
    ttft_s: float = math.nan
    itl_s: list[float] = field(default_factory=list)
    decode_s: float = 0.0
    decode_tokens: int = 0
    compute_s: float = 0.0
    reprefill_s: float = 0.0
    e2e_s: float = math.nan
    proposed: int = 0
    accepted: int = 0
    verify_steps: int = 0
    verify_tokens: int = 0
    overhead_ns: int = 0
    overhead_steps: int = 0
    kv_bytes: int = 0
    kv_alloc_bytes: int = 0
    _itl_cache: tuple[int, Summary] | None = field(default=None, repr=False, compare=False)
    seq_tokens: int = 0  # Σ batch × new tokens over steps: tokens over all sequences
    decode_seq_tokens: int = 0
    prefill_seq_tokens: int = 0  # distinct prompts: the prompt tokens of the first step's sequences
    ttfa_s: float = math.nan
    phase_tokens: dict = field(default_factory=dict)  # phase → new tokens
    phase_itl_s: dict = field(default_factory=dict)  # phase → its ITL, once the run has a phase besides the answer
    last_phase: str = ANSWER  # a run that ends in thinking never closed its think span (cut, or out of tokens)

    @property
    def itl(self) -> Summary:
        # The runs table, the status line and the latency title ask every frame; sorting a long
        # run's thousands of intervals each time costs a fifth of the UI's time at 2,000 tokens/s.
        cached = self._itl_cache
        if cached is None or cached[0] != len(self.itl_s):
            cached = self._itl_cache = (len(self.itl_s), Summary.of(self.itl_s))
        return cached[1]

    @property
    def decode_tps(self) -> float:
        return self.decode_seq_tokens / self.decode_s if self.decode_s > 0 else math.nan

    @property
    def compute_tps(self) -> float:
        return self.decode_seq_tokens / self.compute_s if self.compute_s > 0 else math.nan

    @property
    def e2e_tps(self) -> float:
        return self.seq_tokens / self.e2e_s if self.e2e_s and self.e2e_s > 0 else math.nan

    @property
    def prefill_tps(self) -> float:
        prompts = self.prefill_seq_tokens or self.batch * self.prompt_tokens
        return prompts / self.ttft_s if self.ttft_s and self.ttft_s > 0 else math.nan

    @property
    def thinking_share(self) -> float:
        return self.phase_tokens.get(THINKING, 0) / self.n_tokens if self.n_tokens else math.nan

    def phase_itl(self, phase: str) -> Summary:
        return Summary.of(self.phase_itl_s.get(phase, self.itl_s if phase == ANSWER and not self.phase_itl_s else []))

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else math.nan

    @property
    def mean_accepted_len(self) -> float:
        """Tokens gained per verify step (accepted proposals + the one the target adds)."""
        return self.verify_tokens / self.verify_steps if self.verify_steps else math.nan

    @property
    def overhead_ms_per_step(self) -> float:
        """Host time per step spent outside the model's forward: sampling, cache bookkeeping, events."""
        return self.overhead_ns / self.overhead_steps / 1e6 if self.overhead_steps else math.nan

    def add_step(self, step: Step, batch: int | None = None) -> None:
        """`batch`: what this step ran with, when it differs from the run's start (a mid-run switch)."""
        dt = step.dt_ns / 1e9
        batch = self.batch if batch is None else batch
        made = step.batch_tokens if step.batch else batch * step.n_tokens
        self.n_tokens += step.n_tokens
        self.phase_tokens[step.phase] = self.phase_tokens.get(step.phase, 0) + step.n_tokens
        self.last_phase = step.phase
        if step.phase != ANSWER and not self.phase_itl_s:  # phased from here: the intervals so far were the answer's
            self.phase_itl_s[ANSWER] = list(self.itl_s)
        self.seq_tokens += made
        self.kv_bytes = step.kv_bytes
        self.kv_alloc_bytes = step.kv_alloc_bytes
        if step.kind == "reprefill":
            self.reprefill_s += dt
            return
        if step.kind == "prefill":
            self.prefill_seq_tokens = sum(row[1] for row in step.batch)
            return
        self.decode_s += dt
        self.compute_s += step.compute_ns / 1e9
        self.decode_tokens += step.n_tokens
        self.decode_seq_tokens += made
        self.overhead_ns += max(0, step.dt_ns - step.forward_ns)
        self.overhead_steps += 1
        if step.n_tokens:
            self.itl_s.extend([dt / step.n_tokens] * step.n_tokens)
            if self.phase_itl_s:
                self.phase_itl_s.setdefault(step.phase, []).extend([dt / step.n_tokens] * step.n_tokens)
        if step.kind == "verify":
            self.proposed += step.proposed
            self.accepted += step.accepted
            self.verify_steps += 1
            self.verify_tokens += step.n_tokens


@dataclass
class RunRecord:
    started: RunStarted
    total: TimingStats
    segments: list[TimingStats]
    finished: RunFinished | None = None
    last_t_ns: int = 0
    paused_s: float = 0.0  # compile or pause inside the run: its own phase, not end-to-end time


# Per-token detail kept over every run record the session holds (a Python float in a list is 32
# bytes: 2 MiB). A run's weight is its intervals, kept twice (the run's and its segment's), and its
# segments' own fields: 32 streams of 32 tokens weigh 2,800, so 23 such runs are kept; an engine
# run of 256 tokens, 120. A count of runs alone let 32-stream runs grow the UI by 0.3 MiB a run.
DETAIL_VALUES = 1 << 16
SEGMENT_VALUES = 24  # a TimingStats' own fields, in intervals' worth of memory


def weight(rec: RunRecord) -> int:
    stats = (rec.total, *rec.segments)
    return sum(len(s.itl_s) + sum(map(len, s.phase_itl_s.values())) for s in stats) + SEGMENT_VALUES * len(rec.segments)


class RunTimer:
    """Folds the event stream into per-run and per-segment statistics."""

    def __init__(self) -> None:
        self.runs: dict[int, RunRecord] = {}

    def trim(self, max_runs: int, max_values: int = DETAIL_VALUES) -> None:
        """Forget the oldest finished runs past max_runs, or while the records' detail weighs more
        than max_values. A run still going stays (a second server's may be older than the one that
        just ended), and so does the latest, whatever it weighs: its figures are on the screen."""
        runs = self.runs
        weights = {rid: weight(rec) for rid, rec in runs.items()}
        held = sum(weights.values())
        for rid in list(runs)[:-1]:
            if len(runs) <= max_runs and held <= max_values:
                break
            if runs[rid].finished is not None:
                held -= weights[rid]
                del runs[rid]

    def started(self, ev: RunStarted) -> RunRecord:
        total = TimingStats(ev.levers, ev.levers.batch, ev.prompt_tokens)
        rec = RunRecord(ev, total, [_segment(ev.levers, ev.prompt_tokens)], last_t_ns=ev.t_ns)
        self.runs[ev.run_id] = rec
        return rec

    def step(self, ev: Step) -> None:
        rec = self.runs.get(ev.run_id)
        if rec is None:
            return
        t0 = rec.started.t_ns
        while len(rec.segments) <= ev.segment:
            rec.segments.append(_segment(rec.started.levers, rec.started.prompt_tokens))
        seg = rec.segments[ev.segment]
        if ev.kind == "prefill":
            # One prefill per run in the engine; one per stream on a server, where the run's TTFT
            # is the mean of its streams'.
            seg.ttft_s = (ev.t_ns - t0) / 1e9
            rec.total.ttft_s = mean([s.ttft_s for s in rec.segments if not math.isnan(s.ttft_s)])
        if ev.phase == ANSWER:
            # A server run's streams each have their own, and the run the mean of theirs; an engine
            # run's is its first answer step's, its segment's where the segment made the run's first token.
            ttfa = (ev.t_ns - t0) / 1e9
            if rec.started.levers.server and math.isnan(seg.ttfa_s):
                seg.ttfa_s = ttfa
                rec.total.ttfa_s = mean([s.ttfa_s for s in rec.segments if not math.isnan(s.ttfa_s)])
            elif not rec.started.levers.server and math.isnan(rec.total.ttfa_s):
                rec.total.ttfa_s = ttfa
                if not math.isnan(seg.ttft_s):
                    seg.ttfa_s = ttfa
        # A server run's streams run side by side: its rate is the sum of theirs (N × tokens ÷ the
        # streams' summed time); an engine segment's steps count batch × tokens.
        rec.total.add_step(ev, rec.total.batch if rec.started.levers.server else seg.batch)
        seg.add_step(ev)
        rec.total.e2e_s = (ev.t_ns - t0) / 1e9 - rec.paused_s
        rec.last_t_ns = ev.t_ns

    def phase(self, ev: Phase) -> None:
        """A finished phase inside an unfinished run (a compile after a lever switch, a pause)."""
        if not ev.done or not self.runs:
            return
        rec = self.runs[next(reversed(self.runs))]
        if rec.finished is None and ev.t_ns > rec.started.t_ns:
            rec.paused_s += ev.seconds

    def lever_changed(self, run_id: int | None, segment: int, levers: Levers) -> None:
        rec = self.runs.get(run_id) if run_id is not None else None
        if rec is None:
            return
        while len(rec.segments) <= segment:
            rec.segments.append(_segment(levers, rec.started.prompt_tokens))
        rec.segments[segment].levers = levers
        rec.segments[segment].batch = levers.batch

    def finished(self, ev: RunFinished) -> RunRecord | None:
        rec = self.runs.get(ev.run_id)
        if rec is not None:
            rec.finished = ev
            if ev.prompt_tokens is not None:  # a server counts the prompt (its chat template included)
                for st in (rec.total, *rec.segments):
                    st.prompt_tokens = ev.prompt_tokens
        return rec


def _segment(levers: Levers, prompt_tokens: int) -> TimingStats:
    """A lever segment of an engine run (its batch scales throughput), or one stream of a
    server run: each stream is one sequence, the run's total counts all of them."""
    return TimingStats(levers, 1 if levers.server else levers.batch, prompt_tokens)
