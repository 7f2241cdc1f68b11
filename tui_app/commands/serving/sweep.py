"""`tokentop bench --endpoint URL --sweep LO:HI[:STEP] --slo ...`: how much load fits before the SLO breaks.

The request rate rises from LO by STEP (default a seventh of the span) to HI. Each step sends the
workload at that rate (--repeats rounds of --requests requests, default 20) and counts the requests
that met every SLO; a step passes while that share (goodput ÷ offered) stays at or above
--goodput-level (default 90 %). The sweep stops at the first step that fails, and reports the
highest rate that passed: the headroom.

A step ends early once it cannot pass: more requests already missed the SLO than the level allows
of all it will send, or the server is over-saturated (the last third's TTFT over twice the first
third's, requests finishing slower than they arrive, and the last three missing the SLO): a queue
that grows without bound, so the rest would only wait longer.

The headroom's 95 % interval: each step's rounds resampled with replacement (tui_app/core/stats.py),
the sweep's verdict taken again on each resample, the 2.5th and 97.5th percentiles of the headroom
so found.
"""

from __future__ import annotations

import math
import random

from monitors.timing import percentile
from tui_app.core import fmt
from tui_app.core.options import UsageError, bounded
from tui_app.core.stats import CONFIDENCE, RESAMPLES

DEFAULT_REQUESTS = 20


def add_sweep_args(g) -> None:
    g.add_argument(
        "--sweep", default=None, metavar="LO:HI[:STEP]", help="raise the rate from LO to HI req/s until goodput falls below --goodput-level: the headroom"
    )
    g.add_argument(
        "--goodput-level",
        type=bounded(float, 0, 100, lo_open=True),
        default=90.0,
        metavar="PCT",
        help="--sweep: the share of requests that must meet --slo (default 90)",
    )


def parse_sweep(spec: str) -> list[float]:
    """'0.5:4' → 0.5, 1.0, … 4.0 (eight steps); '1:4:1' → 1, 2, 3, 4."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise UsageError(f"--sweep {spec!r}: expected LO:HI or LO:HI:STEP in requests/s, e.g. 0.5:8 or 1:8:1")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not _is_number(p))
        raise UsageError(f"--sweep {spec!r}: {bad!r} is not a number (LO:HI[:STEP] in requests/s)") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"--sweep {spec!r}: the bounds must be finite numbers")
    lo, hi = values[0], values[1]
    if lo <= 0 or hi < lo:
        raise UsageError(f"--sweep {spec!r}: needs 0 < LO ≤ HI")
    step = values[2] if len(values) == 3 else (hi - lo) / 7 or lo
    if step <= 0:
        raise UsageError(f"--sweep {spec!r}: STEP must be more than 0")
    n = math.floor((hi - lo) / step + 1e-9) + 1
    if n > 100:
        raise UsageError(f"--sweep {spec!r}: {n} steps; at most 100 (a larger STEP)")
    return [round(lo + k * step, 6) for k in range(n)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class StepWatch:
    """Whether a step can still pass, told from its requests as they end (the stop rule above)."""

    def __init__(self, slo: dict, level: float, planned: int, rate: float):
        self.slo, self.level, self.planned, self.rate = slo, level, planned, rate
        self.done: list = []  # its Requests, in the order they ended

    def add(self, request) -> None:
        if request is not None:
            self.done.append(request)

    def stop(self) -> str | None:
        bad = sum(not r.good(self.slo) for r in self.done)
        allowed = math.floor((1 - self.level) * self.planned + 1e-9)
        if bad > allowed:
            return f"cannot pass: {bad} of {self.planned} requests missed the SLO, {allowed} may"
        n = len(self.done)
        if n < 6:
            return None
        by_send = sorted(self.done, key=lambda r: r.sent_s)
        third = n // 3
        first, last = by_send[:third], by_send[-third:]
        ttft_first = percentile([r.ttft_s for r in first if r.ok], 50)
        ttft_last = percentile([r.ttft_s for r in last if r.ok], 50)
        span = max(r.sent_s + r.e2e_s for r in self.done) - min(r.sent_s for r in self.done)
        finishing = n / span if span > 0 else math.inf
        recent_bad = all(not r.good(self.slo) for r in sorted(self.done, key=lambda r: r.sent_s + r.e2e_s)[-3:])
        if ttft_last > 2 * ttft_first and finishing < 0.9 * self.rate and recent_bad:
            return (
                f"over-saturated: TTFT p50 {fmt.ms(ttft_last, 0)} late in the step against {fmt.ms(ttft_first, 0)} early, "
                f"{finishing:.2f} req/s finishing of {self.rate:g} arriving"
            )
        return None


def step_row(cell, rate: float, level: float) -> dict:
    """A step's figures: offered and achieved rates, goodput's share, and each SLO figure at the
    level's percentile (with a 90 % level, the p90 a request must stay under)."""
    rounds = {}
    for r in cell.requests:
        rounds.setdefault(r.round, []).append(r)
    per_round = [sum(r.good(cell.slo) for r in rounds.get(k, [])) for k in range(len(cell.round_walls))]
    planned_each = cell.planned / max(len(cell.round_walls), 1)
    ok = [r for r in cell.requests if r.ok]
    got = {
        "ttft": [r.ttft_s for r in ok],
        "ttfa": [r.ttfa_s for r in ok if not math.isnan(r.ttfa_s)],
        "itl": [r.mean_itl_s for r in ok],
        "tpot": [r.tpot_s for r in ok if not math.isnan(r.tpot_s)],
        "e2e": [r.e2e_s for r in ok],
    }
    good = sum(per_round)
    row = {
        "rate": rate,
        "requests_s": len(ok) / cell.wall_s if cell.wall_s else None,
        "output_tok_s": sum(r.tokens for r in ok) / cell.wall_s if cell.wall_s else None,
        "good": good,
        "planned": cell.planned,
        "good_fraction": good / cell.planned if cell.planned else 0.0,
        "good_per_round": per_round,
        "planned_per_round": planned_each,
        "passed": bool(cell.planned) and good / cell.planned >= level - 1e-12,
        "stopped": cell.stopped,
    }
    for key in cell.slo:
        row[f"{key}_at_level_s"] = percentile(got[key], level * 100) if got[key] else None
    return row


def headroom(steps: list[dict]) -> float | None:
    """The highest rate that passed before the first step that failed; None if the first failed."""
    best = None
    for s in steps:
        if not s["passed"]:
            break
        best = s["rate"]
    return best


def headroom_interval(steps: list[dict], level: float, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """The headroom's percentile-bootstrap interval: each step's rounds resampled, the verdict
    taken again; None with a single round per step."""
    if not steps or all(len(s["good_per_round"]) < 2 for s in steps):
        return None
    rng = random.Random(seed)
    found = []
    for _ in range(resamples):
        best = 0.0
        for s in steps:
            rounds = s["good_per_round"]
            pick = [rounds[rng.randrange(len(rounds))] for _ in rounds]
            if sum(pick) / (s["planned_per_round"] * len(pick)) < level - 1e-12:
                break
            best = s["rate"]
        found.append(best)
    found.sort()
    tail = (1 - CONFIDENCE) / 2 * 100
    return percentile(found, tail, True), percentile(found, 100 - tail, True)


def summary(steps: list[dict], level: float, slo_text: str, server: str) -> tuple[str, dict]:
    """The sweep's verdict in one line, and its JSON."""
    best = headroom(steps)
    ci = headroom_interval(steps, level)
    failed = next((s for s in steps if not s["passed"]), None)
    out = {"server": server, "level": level, "slo": slo_text, "headroom_rate": best, "headroom_ci95": list(ci) if ci else None, "steps": steps}
    share = f"{level * 100:g}%"  # as fmt.pct writes the share that met it
    if best is None:
        s = steps[0]
        why = f"; {s['stopped']}" if s.get("stopped") else ""
        line = (
            f"{server}: the SLO ({slo_text}) is not met even at the first step, {s['rate']:g} req/s: "
            f"{s['good']} of {s['planned']} requests met it ({fmt.pct(s['good_fraction'])} < {share}){why}. Lower --sweep's start or relax --slo."
        )
        out["verdict"] = "never met"
        return line, out
    interval = f" (95 % interval {ci[0]:g}–{ci[1]:g})".replace(" 0–", f" below {steps[0]['rate']:g}–") if ci else ""
    if failed is None:
        line = f"{server}: headroom at least {best:g} req/s{interval}: every step met {slo_text} for {share} of requests; raise --sweep's end to see it break"
        out["verdict"] = "not reached"
    else:
        why = f", {failed['stopped']}" if failed.get("stopped") else ""
        line = (
            f"{server}: headroom {best:g} req/s{interval}: the highest rate where {share} of requests met {slo_text}; "
            f"at {failed['rate']:g} req/s {fmt.pct(failed['good_fraction'])} did{why}"
        )
        out["verdict"] = "found"
    return line, out


def steps_markdown(steps: list[dict], slo: dict, level: float) -> str:
    keys = list(slo)
    p = f"p{level * 100:g}"
    slos = " | ".join(f"{k.upper()} {p} ms (SLO {slo[k] * 1000:g})" for k in keys)
    head = f"| rate req/s | achieved req/s | output tok/s | {slos} | met SLO | verdict |"
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for s in steps:
        lines.append(
            f"| {s['rate']:g} | {fmt.num(s['requests_s'], 2)} | {fmt.num(s['output_tok_s'])} | "
            + " | ".join(fmt.ms(s.get(f"{k}_at_level_s"), 0, unit=False) for k in keys)
            + f" | {s['good']}/{s['planned']} ({fmt.pct(s['good_fraction'])}) | {'pass' if s['passed'] else 'fail'}"
            + (f": {s['stopped']}" if s.get("stopped") else "")
            + " |"
        )
    return "\n".join(lines)
