"""The lever ledger (`g`): for each lever mix the session ran, what it paid on this machine against
plain (every lever off but the cache) on the same prompt and length. Decode tok/s and TTFT as
ratios of the medians over the runs, with a bootstrap interval (stats.py); the one-time costs apart
(quantizing, compiling, recompiles, from the engine's phases); the tokens it takes to win them
back; and a verdict in words. From the Session's run records, the runs table's own numbers: a run
switched midway, stopped or failed, or of a server, is not a measurement of one mix and is left out.
No Textual, no torch.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from monitors.events import Levers, RunFinished, think_label
from monitors.phases import THINKING
from monitors.text import plural
from monitors.timing import TimingStats
from tui_app.core import fmt
from tui_app.core.energy import per_token
from tui_app.core.session import Session
from tui_app.core.stats import unpaired_ratio, with_interval

FINISHED = ("eos", "max tokens")
EVEN = 0.05  # a ratio within 5 % of 1, or an interval that holds 1, is no difference to speak of


@dataclass(frozen=True)
class Entry:
    levers: str
    prompt_tokens: int
    new_tokens: int
    runs: int
    plain_runs: int
    decode: float  # the mix's median decode tok/s ÷ plain's
    decode_ci: tuple[float, float] | None
    ttft: float  # the mix's median TTFT ÷ plain's: below 1, the first token came sooner
    ttft_ci: tuple[float, float] | None
    one_time_s: float  # quantizing and compiling for this mix, recompiles included
    recompiles: int
    graph_breaks: int  # in its compiles, by dynamo's count: each a return to Python inside the step
    payback_tokens: float  # tokens to win the one-time cost back; inf: never (no faster); 0: nothing to win back
    accept: float  # speculation's accepted share of the proposed tokens; nan without it
    note: str  # what the engine said runs instead of a lever's kernel on this machine
    verdict: str
    routing: str = ""  # an MoE's: whether the mix's runs sent the positions to plain's experts
    budget: str = ""  # a thinking budget's: what it bought against plain's unbounded thinking
    energy: str = ""  # where a counter gave the runs' energy: the mix's J a token against plain's

    def row(self) -> tuple[str, ...]:
        payback = "never" if math.isinf(self.payback_tokens) else "–" if not self.one_time_s else f"{self.payback_tokens:,.0f} tok"
        return (
            self.levers,
            f"{self.prompt_tokens}+{self.new_tokens}",
            f"{self.runs} vs {self.plain_runs}",
            with_interval(f"{self.decode:.2f}×", self.decode_ci, lambda v: f"{v:.2f}"),
            with_interval(f"{self.ttft:.2f}×", self.ttft_ci, lambda v: f"{v:.2f}"),
            f"{self.one_time_s:.1f} s{self._compiles()}" if self.one_time_s else "–",
            payback,
            self.verdict,
        )

    def _compiles(self) -> str:
        said = [plural(n, what) for n, what in ((self.recompiles, "recompile"), (self.graph_breaks, "graph break")) if n]
        return f" ({', '.join(said)})" if said else ""


HEADER = ("levers", "prompt+new", "runs", "decode tok/s vs plain", "TTFT vs plain", "one-time", "pays back after", "verdict")


def whole_runs(session: Session) -> dict[tuple[int, int], dict[Levers, list[TimingStats]]]:
    """The runs that measure one mix each, by (prompt tokens, new tokens asked) and levers."""
    out: dict[tuple[int, int], dict[Levers, list[TimingStats]]] = defaultdict(lambda: defaultdict(list))
    for rec in session.timer.runs.values():
        fin, lev = rec.finished, rec.started.levers
        if fin is None or fin.stop_reason not in FINISHED or len(rec.segments) != 1 or lev.server or not rec.total.decode_s:
            continue
        out[(rec.started.prompt_tokens, rec.started.max_new_tokens)][lev].append(rec.total)
    return out


def one_time(session: Session, lev: Levers) -> tuple[float, int, int]:
    """Seconds the engine spent preparing this mix (its quantization, its compiles), its recompiles
    and its compiles' graph breaks."""
    quant = [f"quant:{lev.quant}"] if lev.quant != "off" else []
    compiles = [f"compile:{lev.quant}", f"recompile:{lev.quant}"] if lev.compile else []
    spent = sum(session.one_time.get(k, (0.0, 0, 0))[0] for k in quant + compiles)
    breaks = sum(session.one_time.get(k, (0.0, 0, 0))[2] for k in compiles)
    return spent, session.one_time.get(f"recompile:{lev.quant}", (0.0, 0, 0))[1] if lev.compile else 0, breaks


def _median_of(attr: str):
    return lambda runs: statistics.median(getattr(s, attr) for s in runs)


def entries(session: Session) -> list[Entry]:
    """An entry per mix and workload that has plain runs of the same workload to weigh it by."""
    out = []
    for (prompt, new), mixes in sorted(whole_runs(session).items()):
        plain = mixes.get(Levers())
        if not plain:
            continue
        for lev, runs in mixes.items():
            if lev == Levers():
                continue
            decode, decode_ci = unpaired_ratio(plain, runs, _median_of("decode_tps"))
            ttft, ttft_ci = unpaired_ratio(plain, runs, _median_of("ttft_s"))
            spent, recompiles, breaks = one_time(session, lev)
            saved = 1 / statistics.median(s.decode_tps for s in plain) - 1 / statistics.median(s.decode_tps for s in runs)
            payback = (spent / saved if saved > 0 else math.inf) if spent else 0.0
            proposed = sum(s.proposed for s in runs)
            accept = sum(s.accepted for s in runs) / proposed if proposed else math.nan
            note = session.prepared_for.get(f"quant:{lev.quant}", "") if lev.quant != "off" else ""
            note = note if note != lev.quant else ""
            figures = (decode, decode_ci, ttft, ttft_ci, spent, recompiles, breaks, payback, accept)
            workload = (prompt, new)
            said = (routing_note(session, workload, lev), budget_note(session, workload, lev, plain, runs), energy_note(session, workload, lev))
            entry = Entry(lev.label(), prompt, new, len(runs), len(plain), *figures, note, "", *said)
            # The budget alone decodes at plain's pace: what it bought is the verdict.
            budget_alone = "; ".join(n for n in (entry.budget, entry.energy) if n)
            out.append(replace(entry, verdict=budget_alone) if replace(lev, think=0) == Levers() else _judged(entry))
    return out


def _judged(e: Entry) -> Entry:
    r, ci = e.decode, e.decode_ci
    x = f"{r:.1f}× decode" if r >= 0.95 else f"{r:.2f}× decode"
    if r > 1 + EVEN and (ci is None or ci[0] > 1):
        won = f"; its {e.one_time_s:.1f} s one-time won back after {e.payback_tokens:,.0f} tokens" if e.one_time_s else ""
        verdict = f"pays here: {x}{won}"
    elif r < 1 - EVEN and (ci is None or ci[1] < 1):
        why = f"speculation at {fmt.pct(e.accept)} acceptance" if not math.isnan(e.accept) else e.note
        verdict = f"does not pay here: {x}" + (f" ({why})" if why else "")
    else:
        verdict = f"no clear difference here: {x}" + (f" ({ci[0]:.2f}–{ci[1]:.2f})" if ci else "")
    said = "".join(f"; {n}" for n in (e.routing, e.budget, e.energy) if n)
    return Entry(**{**e.__dict__, "verdict": verdict + said})


def _finished(session: Session, workload: tuple[int, int], lev: Levers) -> list[RunFinished]:
    """The end events of the whole runs of a mix on a workload, in order."""
    return [
        rec.finished
        for rec in session.timer.runs.values()
        if rec.finished is not None
        and rec.finished.stop_reason in FINISHED
        and len(rec.segments) == 1
        and rec.started.levers == lev
        and (rec.started.prompt_tokens, rec.started.max_new_tokens) == workload
    ]


def budget_note(session: Session, workload: tuple[int, int], lev: Levers, plain: list[TimingStats], runs: list[TimingStats]) -> str:
    """What a thinking budget bought against plain's unbounded thinking on the same workload: the
    answer's start (TTFA), the whole run's time and tokens (medians), and whether the answer
    changed (the engine compares the answers' tokens, engine/quality.py)."""
    if not lev.think:
        return ""
    mix_ttfa, plain_ttfa = (_median([s.ttfa_s for s in side]) for side in (runs, plain))
    if math.isnan(mix_ttfa):
        start = "no answer within its tokens"
    elif math.isnan(plain_ttfa):
        start = f"the answer at {fmt.ms(mix_ttfa)}, where plain's never began"
    else:
        start = f"the answer at {fmt.num(mix_ttfa / plain_ttfa, 2)}× plain's TTFA"
    time = _median([s.e2e_s for s in runs]) / _median([s.e2e_s for s in plain])
    tokens = [f"{_median([s.n_tokens for s in side]):.0f}" for side in (runs, plain)]
    thought = [f"{_median([s.phase_tokens.get(THINKING, 0) for s in side]):.0f}" for side in (runs, plain)]
    ends = _finished(session, workload, lev)
    answer = f"; {ends[-1].diff_note}" if ends and ends[-1].diff_note.startswith("answer") else ""
    return f"{think_label(lev.think)} bought {start}, {fmt.num(time, 2)}× plain's time, {' vs '.join(tokens)} tokens ({' vs '.join(thought)} thinking){answer}"


def energy_note(session: Session, workload: tuple[int, int], lev: Levers) -> str:
    """A mix's energy a token against plain's on the same workload, the medians of the runs a
    counter gave a figure, and whose counter (core/energy.py): on a CPU the packages count all
    they ran, so the ratio is the honest part, both sides paying the same idle."""
    sides, source = [], ""
    for side in (lev, Levers()):
        figures = []
        for fin in _finished(session, workload, side):
            source, joules = session.energy.runs.get(fin.run_id, (source, None))
            jpt = per_token(joules, session.timer.runs[fin.run_id].total)
            if jpt:
                figures.append(jpt)
        sides.append(figures)
    if not all(sides):
        return ""
    mix, plain = (statistics.median(side) for side in sides)
    return f"{fmt.num(mix / plain, 2)}× plain's energy a token ({mix:.3g} vs {plain:.3g} J, {source})"


def _median(xs: list) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def routing_note(session: Session, workload: tuple[int, int], lev: Levers) -> str:
    """An MoE's: whether a mix (quantized experts, say) sent the positions to the experts plain did.
    The same greedy text should route the same; where the text differs, so will the routing."""
    plain, mix = ([f for f in _finished(session, workload, m) if f.expert_counts] for m in (Levers(), lev))
    ref, counts = (side[-1].expert_counts if side else None for side in (plain, mix))
    if not ref or not counts:
        return ""
    output = mix[-1].diff_note
    if counts == ref:
        return "routes as plain"
    layers = sum(1 for a, b in zip(counts, ref, strict=False) if a != b)
    text = "for the same text" if output == "identical" else f"its text {output}" if output.startswith("differs") else output
    return f"routes otherwise in {layers} of {len(ref)} layers ({text})"


def lines(session: Session) -> list[str]:
    """The ledger as text lines (the export, `run --no-tui`'s end, the screen without a table)."""
    found = entries(session)
    if not found:
        return ["no lever mix to weigh yet: run plain (every lever off but the cache) and a mix on the same prompt and length"]
    return [f"{e.levers} ({e.prompt_tokens}+{e.new_tokens} tokens, {e.runs} vs {e.plain_runs} plain runs): {e.verdict}" for e in found]
