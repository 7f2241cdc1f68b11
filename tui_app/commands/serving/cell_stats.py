"""A serving-bench cell's figures with their 95 % intervals over its rounds (--repeats), and two
servers' ratios with theirs (tui_app/core/stats.py says how).

Each figure is computed from a set of rounds exactly as the cell's own figure is from all of them:
latencies pooled over the rounds' requests, rates as their tokens or requests over the rounds'
summed wall time."""

from __future__ import annotations

import math
from collections.abc import Callable

from monitors.timing import mean, percentile
from tui_app.core import fmt
from tui_app.core.stats import interval, paired_ratio, with_interval

Round = tuple[list, float]  # (its requests, its wall time)


def _ok(rounds: list[Round]) -> list:
    return [r for reqs, _ in rounds for r in reqs if r.ok]


def _wall(rounds: list[Round]) -> float:
    return sum(w for _, w in rounds)


def _rate(count: float, rounds: list[Round]) -> float:
    wall = _wall(rounds)
    return count / wall if wall > 0 else math.nan


FIGURES: dict[str, Callable[[list[Round], dict], float]] = {
    "ttft_p50_s": lambda rs, slo: percentile([r.ttft_s for r in _ok(rs)], 50),
    "ttft_p99_s": lambda rs, slo: percentile([r.ttft_s for r in _ok(rs)], 99),
    "itl_p50_s": lambda rs, slo: percentile([x for r in _ok(rs) for x in r.itl_s], 50),
    "tpot_mean_s": lambda rs, slo: mean([r.tpot_s for r in _ok(rs) if not math.isnan(r.tpot_s)]),
    "e2e_p50_s": lambda rs, slo: percentile([r.e2e_s for r in _ok(rs)], 50),
    "output_tok_s": lambda rs, slo: _rate(sum(r.tokens for r in _ok(rs)), rs),
    "requests_s": lambda rs, slo: _rate(len(_ok(rs)), rs),
    "goodput_requests_s": lambda rs, slo: _rate(sum(r.good(slo) for reqs, _ in rs for r in reqs), rs) if slo else math.nan,
}
SHOWN = (("TTFT p50", "ttft_p50_s", True), ("ITL p50", "itl_p50_s", True), ("TPOT mean", "tpot_mean_s", True), ("output tok/s", "output_tok_s", False))


def rounds_of(cell) -> list[Round]:
    return [([r for r in cell.requests if r.round == k], w) for k, w in enumerate(cell.round_walls)]


def intervals(cell) -> dict[str, tuple[float, float]]:
    """Each figure's 95 % interval over the cell's rounds; none with fewer than two rounds. Kept on
    the cell once taken (2,000 resamples a figure): the table, the JSON and the report read it."""
    if cell.intervals is not None and cell.intervals.get("rounds") == len(cell.round_walls):
        return cell.intervals["figures"]
    rounds = rounds_of(cell)
    out = {}
    for name, f in FIGURES.items():
        ci = interval(rounds, lambda rs, f=f: f(rs, cell.slo))
        if ci is not None:
            out[name] = ci
    cell.intervals = {"rounds": len(cell.round_walls), "figures": out}
    return out


def flat(cell) -> dict:
    """What a cell's JSON row adds: rounds, cached prompt tokens, the generator's send error, the
    intervals."""
    ok = [r for r in cell.requests if r.ok]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    late = [r.late_s for r in cell.requests if r.late_s is not None]
    good = sum(r.good(cell.slo) for r in cell.requests) if cell.slo else None
    d: dict = {
        "rounds": len(cell.round_walls),
        "planned": cell.planned or len(cell.requests),
        "stopped": cell.stopped,
        "server_cached_tokens_mean": mean(cached) if cached else None,
        "send_late_p50_s": percentile(late, 50) if late else None,
        "send_late_p99_s": percentile(late, 99) if late else None,
        "good_fraction": good / (cell.planned or len(cell.requests)) if good is not None and (cell.planned or cell.requests) else None,
    }
    for name, ci in intervals(cell).items():
        d[f"{name}_ci95"] = list(ci)
    return d


def prompt_text(cell) -> str:
    """The prompt's tokens and, where the server's prefix cache had some, how many: '43 (42 cached)'."""
    cached = [r.cached_tokens for r in cell.requests if r.ok and r.cached_tokens is not None]
    share = round(mean(cached)) if cached else 0
    return f"{cell.prompt_tokens} ({share} cached)" if share else str(cell.prompt_tokens)


def _show(name: str, is_ms: bool) -> Callable[[float], str]:
    return (lambda x: fmt.ms(x, 1, unit=False)) if is_ms else (lambda x: fmt.num(x))


def intervals_markdown(cells: list) -> str:
    """The main figures with their 95 % intervals over the rounds (ms, tok/s)."""
    head = "| server | load | prompt→new | rounds | " + " | ".join(t + (" ms" if ms else "") for t, _, ms in SHOWN) + " |"
    lines = ["With 95 % intervals over the rounds (bootstrap):", "", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for c in cells:
        rounds = rounds_of(c)
        ci = intervals(c)
        vals = []
        for _, name, is_ms in SHOWN:
            show = _show(name, is_ms)
            vals.append(with_interval(show(FIGURES[name](rounds, c.slo)), ci.get(name), show))
        lines.append(f"| {c.server} | {c.load} | {prompt_text(c)}→{c.new_tokens} | {len(rounds)} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def ratios(cells: list) -> list[dict]:
    """Each later server ÷ the first on the same cell: a figure's ratio with its interval, rounds paired."""
    by_key: dict[tuple, list] = {}
    for c in cells:
        by_key.setdefault((c.load, c.key), []).append(c)
    out = []
    for group in by_key.values():
        base = group[0]
        for other in group[1:]:
            a, b = rounds_of(base), rounds_of(other)
            n = min(len(a), len(b))
            row = {"server": other.server, "base": base.server, "load": base.load, "prompt_tokens": base.prompt_tokens, "new_tokens": base.new_tokens}
            for _, name, _ms in SHOWN:
                point, ci = paired_ratio(a[:n], b[:n], lambda rs, f=FIGURES[name], slo=base.slo: f(rs, slo))
                row[f"{name}_ratio"] = point
                row[f"{name}_ratio_ci95"] = list(ci) if ci else None
            out.append(row)
    return out


def ratios_markdown(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        parts = []
        for title, name, _ in SHOWN:
            ci = r[f"{name}_ratio_ci95"]
            parts.append(f"{title} " + with_interval(fmt.num(r[f"{name}_ratio"], 2), tuple(ci) if ci else None, lambda x: fmt.num(x, 2)))
        lines.append(f"{r['server']} ÷ {r['base']} at {r['load']} {r['prompt_tokens']}→{r['new_tokens']}: " + ", ".join(parts))
    return "\n".join(lines)
