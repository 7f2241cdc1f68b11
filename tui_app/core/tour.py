"""A demo tour (`tokentop demo`): steps that each set the levers and the prompt, hold them for some
runs, and state the effect measured against an earlier step, from the Session's rows (the runs
table's numbers). Read from a TOML script (tomllib) or the default tour; no Textual, no torch.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace

from monitors.events import BATCH_SIZES, QUANT_LEVELS, SPEC_MODES, THINK_BUDGETS, Levers
from tui_app.core import fmt, ledger
from tui_app.core.session import Row, Session
from tui_app.prompts import PRESETS
from tui_app.requests import RunRequest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

LEVERS = ("cache", "compile", "quant", "spec", "batch", "think")
# Back to plain, then on, in an order no engine refuses: turning a lever on may need another on
# (compile needs the cache) or off (spec needs batch 1).
RESET_ORDER = (("spec", "off"), ("think", 0), ("compile", False), ("batch", 1), ("cache", True), ("quant", "off"))
APPLY_ORDER = ("quant", "batch", "cache", "compile", "spec", "think")
FINISHED = ("eos", "max tokens")  # a stopped or failed run is not a measurement of its step
# What a step's effect can state: decode tok/s, ITL p50, time to first token, time to the first
# answer token, speculation's acceptance, the leak detector's verdict on the session's baselines so far.
WATCH = ("tok/s", "itl", "ttft", "ttfa", "accept", "leak", "experts")
STEP_FIELDS = ("label", "caption", "levers", "preset", "prompt", "tokens", "runs", "seconds", "compare", "watch", "eos", "thinking", "moe")
DEFAULT_TOKENS = 64


def lever_settings(levers: Levers) -> list[tuple[str, object]]:
    """The (lever, value) settings that take an engine from any levers to `levers`."""
    return [*RESET_ORDER, *((name, getattr(levers, name)) for name in APPLY_ORDER)]


class TourError(ValueError):
    """A script that cannot run; the message is one line naming the step and the field."""


@dataclass(frozen=True)
class TourStep:
    label: str
    caption: str  # what to watch while the step runs
    levers: Levers = field(default_factory=Levers)
    preset: str = "long"
    prompt: str | None = None
    tokens: int = DEFAULT_TOKENS  # new tokens per run
    runs: int = 1
    seconds: float = 0.0  # in the TUI, how long the measured effect stays up before the next step
    compare: str | None = None  # an earlier step's label
    watch: tuple[str, ...] = ("tok/s",)
    server: int = 0  # attached to servers: which one the step's runs go to (1 = the first URL); 0 for the engine
    eos: bool = False  # runs end at the model's end of text: what a thinking budget saves is the run's length
    thinking: bool = False  # for a model that thinks: left out, and said, where the model has no think span
    moe: bool = False  # for an MoE whose routing is counted: left out, and said, where the model is not one

    def request(self) -> RunRequest:
        # ignore_eos: every run of a step decodes the same number of tokens, so steps compare like for like.
        return RunRequest(prompt=self.prompt, preset=self.preset, max_new_tokens=self.tokens, ignore_eos=not self.eos)


def _step(label, caption, preset="long", compare=None, watch=("tok/s",), moe=False, **levers) -> TourStep:
    return TourStep(label, caption, Levers(**levers), preset, None, DEFAULT_TOKENS, 1, 4.0, compare, watch, moe=moe)


def _thinking_step(label, caption, compare=None, **levers) -> TourStep:
    # To the answer's end: a think takes hundreds of tokens, and a budget shortens the whole run.
    return TourStep(label, caption, Levers(**levers), "short", None, 512, 1, 4.0, compare, ("ttfa",), eos=True, thinking=True)


# The seed notebooks' experiments in their order. Compile is shown on int4, where the compiled step
# is one C++ op (lever_control._compiled_fn): the fp32 torch.compile takes minutes on a small CPU.
DEFAULT_TOUR = (
    _step("plain", "the baseline: full-precision weights, KV cache on, eager PyTorch, one sequence. Watch tok/s in the status bar."),
    _step("no-cache", "KV cache off: watch the latency chart climb, every step recomputes the whole context.", cache=False, compare="plain", watch=("itl",)),
    _step("cache", "KV cache back on: each step attends over cached keys and values, the latency line drops flat.", compare="no-cache"),
    _step(
        "short",
        "a short prompt: the first token comes sooner (less prefill), each step reads less cache.",
        preset="short",
        compare="cache",
        watch=("ttft",),
    ),
    _step("int8", "int8 weights: a quarter of the bytes to read per token. Watch tok/s, and perplexity in the runs table.", compare="plain", quant="int8"),
    _step("int4", "int4 weights: an eighth of the bytes; perplexity beside the speed shows what it costs.", compare="plain", quant="int4"),
    _step("compile", "compile on int4: the framework's per-step overhead gone, the same tokens.", compare="int4", quant="int4", compile=True),
    _step("story", "a story to retell, plain: the answer repeats the prompt nearly word for word.", preset="story"),
    _step(
        "lookup",
        "prompt lookup: proposals copied from the prompt, verified in one pass. Watch the accepted tokens.",
        preset="story",
        compare="story",
        watch=("accept", "tok/s"),
        spec="lookup",
    ),
    _step(
        "batch4",
        "batch 4: other prompts arrive and join yours in each step; the batch's tok/s up, each token's latency up too.",
        compare="cache",
        watch=("tok/s", "itl"),
        batch=4,
    ),
    _step(
        "experts",
        "an MoE at batch 4: a decode step reads the union of its rows' experts, not one token's k of n (E shows which).",
        compare="cache",
        watch=("experts", "tok/s"),
        moe=True,
        batch=4,
    ),
    _thinking_step("thinking", "a thinking model: its think drawn apart in the tokens pane (f folds it), the answer from its TTFA mark on."),
    _thinking_step(
        "budget",
        "a thinking budget of 64 tokens: the engine closes the think there, the answer comes sooner; the verdict says whether it changed.",
        compare="thinking",
        think=64,
    ),
)


def fitting(steps: list[TourStep], thinks: bool, moe: bool = False) -> tuple[list[TourStep], str]:
    """The steps this model can show, and what was left out and why."""
    why = []
    for wanted, has, reason in (("thinking", thinks, "the model has no think span"), ("moe", moe, "the model is not an MoE whose routing is counted")):
        left = [s.label for s in steps if getattr(s, wanted) and not has]
        why += [f"left out {', '.join(left)}: {reason}"] if left else []
    return [s for s in steps if (thinks or not s.thinking) and (moe or not s.moe)], "; ".join(why)


def server_tour(servers: int, tokens: int | None = None, seconds: float | None = None) -> list[TourStep]:
    """The tour on attached servers, with the levers a client has: prompt length, concurrent
    streams, and which server (each after the first on the first's prompt, for the comparison)."""

    def step(label, caption, preset="short", compare=None, watch=("tok/s",), streams=1, server=1) -> TourStep:
        return TourStep(label, caption, Levers(batch=streams), preset, None, DEFAULT_TOKENS, 1, 4.0, compare, watch, server)

    steps = [
        step("one stream", "one request at a time: TTFT is the server's prefill of the prompt, ITL its decode step. Watch tok/s in the status bar."),
        step(
            "long prompt",
            "a long prompt: the server's prefill grows with it (TTFT up), and each step attends over more context.",
            preset="long",
            compare="one stream",
            watch=("ttft", "itl"),
        ),
        step(
            "4 streams",
            "four requests at once, batched into each of the server's steps: each stream's ITL rises; the total rate rises where the server is memory-bound.",
            compare="one stream",
            watch=("tok/s", "itl"),
            streams=4,
        ),
    ]
    steps += [
        step(f"server {i}", f"the same prompt on server {i}: its own settings, on the same charts.", compare="one stream", watch=("tok/s", "ttft"), server=i)
        for i in range(2, servers + 1)
    ]
    return [_override(s, tokens, seconds) for s in steps]


def default_tour(tokens: int | None = None, seconds: float | None = None) -> list[TourStep]:
    return [_override(s, tokens, seconds) for s in DEFAULT_TOUR]


def _override(step: TourStep, tokens: int | None, seconds: float | None) -> TourStep:
    return replace(step, tokens=tokens or step.tokens, seconds=step.seconds if seconds is None else seconds)


def load_tour(path: str, tokens: int | None = None, seconds: float | None = None) -> list[TourStep]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise TourError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TourError(f"{path}: not TOML: {exc}") from None
    return [_override(s, tokens, seconds) for s in parse_tour(data)]


def parse_tour(data: dict) -> list[TourStep]:
    """Steps from a parsed script: `[[step]]` tables, in order."""
    unknown = sorted(set(data) - {"step"})
    if unknown:
        raise TourError(f"unknown top-level key {unknown[0]!r}: a script is a list of [[step]] tables")
    raw = data.get("step")
    if not isinstance(raw, list) or not raw:
        raise TourError("no steps: a script is a list of [[step]] tables")
    steps: list[TourStep] = []
    for i, table in enumerate(raw, 1):
        steps.append(_parse_step(i, table, steps))
    return steps


def _parse_step(i: int, t: dict, earlier: list[TourStep]) -> TourStep:
    name = f"step {i}" + (f" ({t['label']})" if isinstance(t.get("label"), str) else "")

    def bad(what: str) -> TourError:
        return TourError(f"{name}: {what}")

    for key in t:
        if key not in STEP_FIELDS:
            raise bad(f"unknown field {key!r} (fields: {', '.join(STEP_FIELDS)})")
    label = t.get("label", str(i))
    if not isinstance(label, str) or not label.strip():
        raise bad("label must be a non-empty string")
    if any(s.label == label for s in earlier):
        raise bad(f"label {label!r} is already an earlier step's")
    caption = t.get("caption")
    if not isinstance(caption, str) or not caption.strip():
        raise bad("caption is missing: say what to watch")
    levers = _levers(t.get("levers", {}), bad)
    preset = t.get("preset", "long")
    if preset not in PRESETS or preset == "file":
        raise bad(f"preset {preset!r} is not one of {', '.join(p for p in PRESETS if p != 'file')} (a text of your own: prompt = ...)")
    prompt = t.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise bad("prompt must be non-empty text")
    tokens, runs = _whole(t, "tokens", DEFAULT_TOKENS, bad), _whole(t, "runs", 1, bad)
    seconds = t.get("seconds", 0.0)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise bad(f"seconds must be a number, 0 or more (got {seconds!r})")
    compare = t.get("compare")
    if compare is not None and not any(s.label == compare for s in earlier):
        raise bad(f"compare = {compare!r} is not an earlier step's label" + (f" ({', '.join(s.label for s in earlier)})" if earlier else ""))
    watch = t.get("watch", ["tok/s"])
    watch = [watch] if isinstance(watch, str) else watch
    if not isinstance(watch, list) or not watch or any(w not in WATCH for w in watch):
        raise bad(f"watch must be one or more of {', '.join(WATCH)} (got {t.get('watch')!r})")
    flags = {key: t.get(key, False) for key in ("eos", "thinking", "moe")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise bad(f"{key} must be true or false (got {value!r})")
    return TourStep(label, caption.strip(), levers, preset, prompt, tokens, runs, float(seconds), compare, tuple(watch), **flags)


def _whole(t: dict, key: str, default: int, bad) -> int:
    v = t.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad(f"{key} must be a whole number, 1 or more (got {v!r})")
    return v


def _levers(raw, bad) -> Levers:
    if not isinstance(raw, dict):
        raise bad('levers must be a table, e.g. levers = { quant = "int4", compile = true }')
    allowed = {"cache": (True, False), "compile": (True, False), "quant": QUANT_LEVELS, "spec": SPEC_MODES, "batch": BATCH_SIZES, "think": THINK_BUDGETS}
    for key, value in raw.items():
        if key not in allowed:
            raise bad(f"levers.{key}: unknown lever (levers: {', '.join(LEVERS)})")
        if isinstance(value, bool) != isinstance(allowed[key][0], bool) or value not in allowed[key]:
            raise bad(f"levers.{key} = {value!r}: expected one of {', '.join(fmt_value(v) for v in allowed[key])}")
    return Levers(**raw)


def fmt_value(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# ---------------------------------------------------------------- measured effects
@dataclass
class Figures:
    """A step's runs, from the Session's rows: means over its finished runs."""

    label: str
    levers: str
    runs: int
    prompt_tokens: int
    tok_s: float
    ttft_s: float
    itl_s: float
    ttfa_s: float
    accept: float
    tok_per_step: float
    perplexity: float | None
    quant: str
    experts: float = math.nan  # an MoE's: the distinct experts a decode step of the step's last run read, on average

    @classmethod
    def of(cls, label: str, rows: list[Row]) -> Figures | None:
        rows = [r for r in rows if r.segment is None and r.finished is not None and r.stats.n_tokens]
        if not rows:
            return None
        stats = [r.stats for r in rows]
        proposed = sum(s.proposed for s in stats)
        ppl = next((r.finished.perplexity for r in reversed(rows) if r.finished and r.finished.perplexity is not None), None)
        return cls(
            label,
            stats[-1].levers.label(),
            len(rows),
            stats[-1].prompt_tokens,
            _mean([s.decode_tps for s in stats]),
            _mean([s.ttft_s for s in stats]),
            _mean([s.itl.p50 for s in stats]),
            _mean([s.ttfa_s for s in stats]),
            sum(s.accepted for s in stats) / proposed if proposed else math.nan,
            _mean([s.mean_accepted_len for s in stats]) if proposed else math.nan,
            ppl,
            stats[-1].levers.quant,
        )

    def value(self, watch: str) -> float:
        return {"tok/s": self.tok_s, "itl": self.itl_s, "ttft": self.ttft_s, "ttfa": self.ttfa_s, "accept": self.accept, "experts": self.experts}[watch]


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def speedups(levers: Levers, base: Levers) -> list[str]:
    """The levers `levers` turns on that `base` has off, each of which promises a faster decode."""
    on = [("cache", levers.cache and not base.cache), ("compile", levers.compile and not base.compile)]
    on += [(levers.quant, levers.quant != "off" and levers.quant != base.quant), (f"spec:{levers.spec}", levers.spec != "off" and base.spec == "off")]
    return [name for name, turned_on in on if turned_on]


@dataclass
class StepResult:
    step: TourStep
    run_ids: list[int]
    refused: list[str]
    figures: Figures | None
    base: Figures | None  # the compared step's
    base_levers: Levers | None = None
    note: str = ""  # what the engine said it prepared for this step's levers (a kernel it had to do without)
    leak: str = ""  # the leak detector's verdict when the step ended
    verdict: str = ""  # the ledger's on this step's levers against plain on its workload, where it has one

    def effect(self) -> str:
        """The measured effect in one line, e.g. 'int4: 2.6× plain tok/s (48.1 vs 18.3), ppl 24.57 vs 24.60'."""
        s, f, b = self.step, self.figures, self.base
        if self.refused:
            return f"{s.label}: refused: {'; '.join(self.refused)}"
        if f is None:
            return f"{s.label}: no finished run to measure"
        parts = [self.leak if w == "leak" else _statement(w, f, b) for w in s.watch]
        if self.verdict:
            parts.append(self.verdict)
        elif self.pays() is False:
            parts.append(f"{' + '.join(speedups(s.levers, self.base_levers))} does not pay on this machine" + (f" ({self.note})" if self.note else ""))
        if b is not None and f.quant != b.quant and f.perplexity is not None and b.perplexity is not None:
            parts.append(f"ppl {f.perplexity:.2f} vs {b.perplexity:.2f}")
        return f"{s.label}: " + ", ".join(parts)

    def pays(self) -> bool | None:
        """Whether the levers this step turns on made decode faster than its compared step did:
        None where it turns none on, or either step has no figure."""
        f, b = self.figures, self.base
        if f is None or b is None or self.base_levers is None or not speedups(self.step.levers, self.base_levers):
            return None
        return bool(f.tok_s > b.tok_s)


def _statement(watch: str, f: Figures, b: Figures | None) -> str:
    if watch == "accept":
        return f"{fmt.pct(f.accept)} of proposed tokens accepted ({fmt.num(f.tok_per_step, 2)} tok/step)"
    if watch == "experts":
        than = f", {fmt.num(ratio(f.experts, b.experts), 2)}× {b.label}'s {fmt.num(b.experts, 1)}" if b is not None else ""
        return f"{fmt.num(f.experts, 1)} experts a decode step read{than}"
    unit = {"tok/s": "tok/s", "itl": "ITL p50", "ttft": "TTFT", "ttfa": "TTFA"}[watch]
    shown = (lambda v: fmt.num(v)) if watch == "tok/s" else (lambda v: fmt.ms(v))
    a = f.value(watch)
    if b is None:
        return f"{unit} {shown(a)}"
    if watch == "tok/s":
        return f"{fmt.num(ratio(a, b.tok_s), 1)}× {b.label} tok/s ({shown(a)} vs {shown(b.tok_s)})"
    return f"{unit} {fmt.num(ratio(a, b.value(watch)), 2)}× {b.label}'s ({shown(a)} vs {shown(b.value(watch))})"


class TourLog:
    """What a tour has measured so far, step by step (the TUI may go back and redo a step)."""

    def __init__(self, steps: list[TourStep]):
        self.steps = steps
        self.results: dict[str, StepResult] = {}

    def record(self, session: Session, step: TourStep, run_ids: list[int], refused: list[str]) -> StepResult:
        ids = set(run_ids)
        rows = [r for r in session.rows() if r.run_id in ids]
        base = self.results.get(step.compare) if step.compare else None
        # The quantize phase's word on the level in use: plain "int8", or what ran instead of its kernel.
        note = session.prepared.get("quantize", "")
        note = note if step.levers.quant != "off" and note.startswith(step.levers.quant) and note != step.levers.quant else ""
        result = StepResult(
            step, list(run_ids), list(refused), Figures.of(step.label, rows), base.figures if base else None, base.step.levers if base else None, note
        )
        run, hits, steps = session.decode_hits
        if result.figures is not None and run in ids and steps:
            result.figures.experts = hits / steps
        if result.figures is not None:
            mine = [e for e in ledger.entries(session) if e.levers == result.figures.levers and e.prompt_tokens == result.figures.prompt_tokens]
            result.verdict = mine[0].verdict if mine else ""
        if session.verdict is not None:
            # "leak suspected (…)", not "leak: …": the step's label leads the line, with its colon
            said = {"none": "no leak", "suspected": "leak suspected"}.get(session.verdict.status, "leak verdict " + session.verdict.status)
            result.leak = said + session.verdict.text().removeprefix(f"leak: {session.verdict.status}")
        self.results[step.label] = result
        return result

    def summary(self) -> list[str]:
        """Every measured step's numbers and ×baseline (the first step's tok/s), as table lines."""
        done = [self.results[s.label] for s in self.steps if s.label in self.results]
        base = next((r.figures for r in done if r.figures is not None), None)
        w = max([10, *(len(r.step.label) for r in done)])
        lw = max([22, *(len(r.figures.levers) for r in done if r.figures is not None)])
        head = f"{'step':<{w}} {'levers':<{lw}} {'prompt':>6} {'tok/s':>7} {'×base':>6} {'TTFT':>8} {'ITL p50':>8} {'accept':>7} {'ppl':>6}"
        lines = [head]
        for r in done:
            f = r.figures
            if f is None:
                lines.append(f"{r.step.label:<{w}} {'refused' if r.refused else 'no finished run'}")
                continue
            x = ratio(f.tok_s, base.tok_s) if base else math.nan
            ppl = f"{f.perplexity:.2f}" if f.perplexity is not None else "–"
            lines.append(
                f"{r.step.label:<{w}} {f.levers:<{lw}} {f.prompt_tokens:>6} {fmt.num(f.tok_s):>7} {fmt.num(x, 2) + '×':>6} "
                f"{fmt.ms(f.ttft_s):>8} {fmt.ms(f.itl_s):>8} {fmt.pct(f.accept):>7} {ppl:>6}"
            )
        return lines
