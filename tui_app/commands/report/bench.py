"""A `tokentop bench -o json` result's report: TTFT and ITL against prompt length, decode tok/s per
lever setting, and the results table."""

from __future__ import annotations

import html
import math
from pathlib import Path

from tui_app.commands.report.page import PALETTE, Figure, Report, ReportError
from tui_app.core import fmt


def _levers_order(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["levers"] for r in rows))


def bench_report(p: Path, data: dict) -> Report:
    rows = data["results"]
    if not all(isinstance(r, dict) and "levers" in r and "prompt_tokens" in r for r in rows):
        raise ReportError(f"{p} looks like a bench result but its results lack levers or prompt_tokens")
    measured = [r for r in rows if not r.get("refused") and r.get("ttft_p50") is not None]
    if not measured:
        raise ReportError(f"{p} holds no measured configuration (every one refused or empty)")
    env = data.get("environment") or {}
    settings = data.get("settings") or {}
    meta = [
        ("model", str(env.get("model", "?"))),
        ("device", f"{env.get('device', '?')}, {env.get('dtype', '?')}, {env.get('threads', '?')} threads"),
        ("torch", str((env.get("versions") or {}).get("torch", "?"))),
        ("taken", str(env.get("date", "?"))),
        ("repeats", f"{settings.get('warmup', '?')} warmup + {settings.get('repeats', '?')} repeats per configuration"),
    ]
    refused = [r for r in rows if r.get("refused")]
    figures = [
        bench_latency_figure(measured, "ttft", "TTFT", "time to first token (ms)"),
        bench_latency_figure(measured, "itl", "ITL", "inter-token latency (ms)"),
        bench_tps_figure(measured),
    ]
    notes = (
        [f"{len(refused)} configuration(s) refused: " + "; ".join(f"{r['levers']} {r['prompt_tokens']}→{r['new_tokens']}: {r['refused']}" for r in refused)]
        if refused
        else []
    )
    return Report(f"tokentop bench — {p.name}", meta, figures, [bench_table_html(rows)], notes)


def _series_key(r: dict, many_new: bool) -> str:
    return f"{r['levers']} →{r['new_tokens']}" if many_new else r["levers"]


def bench_latency_figure(rows: list[dict], metric: str, name: str, ylabel: str) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 3.8), layout="constrained")
    ax = fig.add_subplot()
    many_new = len({r["new_tokens"] for r in rows}) > 1
    keys = list(dict.fromkeys(_series_key(r, many_new) for r in rows))
    lengths = sorted({r["prompt_tokens"] for r in rows})
    log = lengths[-1] >= 4 * lengths[0]
    span = (lengths[-1] - lengths[0]) or lengths[0]
    for k, key in enumerate(keys):
        rs = sorted((r for r in rows if _series_key(r, many_new) == key), key=lambda r: r["prompt_tokens"])
        # Side by side, so that whiskers of the levers at one prompt length do not hide each other.
        shift = (k - (len(keys) - 1) / 2) * 0.015
        xs = [r["prompt_tokens"] * 10**shift if log else r["prompt_tokens"] + shift * span for r in rs]
        p50 = [r[f"{metric}_p50"] * 1000 for r in rs]
        p95 = [max(r[f"{metric}_p95"] * 1000 - m, 0) for r, m in zip(rs, p50, strict=True)]
        p99 = [max(r[f"{metric}_p99"] * 1000 - m, 0) for r, m in zip(rs, p50, strict=True)]
        colour = PALETTE[k % len(PALETTE)]
        ax.errorbar(xs, p50, yerr=[[0] * len(rs), p99], fmt="none", ecolor=colour, elinewidth=0.8, capsize=2)
        ax.errorbar(xs, p50, yerr=[[0] * len(rs), p95], fmt="o-", color=colour, elinewidth=2.5, capsize=0, ms=5, label=key)
    if log:
        ax.set_xscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="levers", title_fontsize=8)
    caption = f"{name} median (dot) against prompt length for each lever setting; thick whisker up to p95, thin up to p99."
    return Figure(metric, f"{name} against prompt length", fig, caption)


def _ratio_to_plain(rows: list[dict], r: dict) -> float:
    plain = next((x for x in rows if x["levers"] == "plain" and x["prompt_tokens"] == r["prompt_tokens"] and x["new_tokens"] == r["new_tokens"]), None)
    if plain is None or not plain.get("tps_mean"):
        return math.nan
    return r["tps_mean"] / plain["tps_mean"]


def bench_tps_figure(rows: list[dict]) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 3.8), layout="constrained")
    ax = fig.add_subplot()
    groups = list(dict.fromkeys((r["prompt_tokens"], r["new_tokens"]) for r in rows))
    levers = _levers_order(rows)
    width = 0.8 / len(levers)
    for k, name in enumerate(levers):
        xs, ys, lo, hi, labels = [], [], [], [], []
        for g, (pt, nt) in enumerate(groups):
            r = next((x for x in rows if x["levers"] == name and (x["prompt_tokens"], x["new_tokens"]) == (pt, nt)), None)
            if r is None:
                continue
            xs.append(g + (k - (len(levers) - 1) / 2) * width)
            ys.append(r["tps_mean"])
            lo.append(max(r["tps_mean"] - (r.get("tps_min") or r["tps_mean"]), 0))
            hi.append(max((r.get("tps_max") or r["tps_mean"]) - r["tps_mean"], 0))
            ratio = _ratio_to_plain(rows, r)
            labels.append(f"{r['tps_mean']:.0f}" + ("" if math.isnan(ratio) else f"\n×{ratio:.2f}"))
        bars = ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=2, color=PALETTE[k % len(PALETTE)], label=name, error_kw={"elinewidth": 0.8})
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), [f"{pt}→{nt} tokens" for pt, nt in groups])
    ax.set_ylabel("decode tok/s")
    ax.margins(y=0.25)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, title="levers", title_fontsize=8, ncols=min(len(levers), 4))
    caption = "Decode tokens per second (mean of the repeats, whisker min–max) of each lever setting, and its ratio to plain at the same lengths."
    return Figure("tps", "Decode tok/s per lever", fig, caption)


def bench_table_html(rows: list[dict]) -> str:
    def ms3(r, metric):
        return " / ".join(fmt.ms(r.get(f"{metric}_{q}"), 2 if metric == "itl" else 1, unit=False) for q in ("p50", "p95", "p99"))

    head = ["levers", "prompt→new", "TTFT ms p50 / p95 / p99", "ITL ms p50 / p95 / p99", "tok/s", "×plain", "peak RSS", "ppl", "vs plain greedy"]
    body = []
    for r in rows:
        if r.get("refused"):
            cells = [r["levers"], f"{r['prompt_tokens']}→{r['new_tokens']}", f"refused: {r['refused']}"] + [""] * 6
        else:
            cells = [
                r["levers"],
                f"{r['prompt_tokens']}→{r['new_tokens']}",
                ms3(r, "ttft"),
                ms3(r, "itl"),
                fmt.num(r.get("tps_mean")),
                fmt.num(_ratio_to_plain(rows, r), 2),
                fmt.nbytes(r.get("peak_rss")),
                fmt.num(r.get("perplexity"), 2),
                str(r.get("diff_note", "")),
            ]
        body.append("<tr>" + "".join(f'<td class="{"l" if i in (0, 8) else "r"}">{html.escape(c)}</td>' for i, c in enumerate(cells)) + "</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<h2>Results</h2><table id="results"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'
