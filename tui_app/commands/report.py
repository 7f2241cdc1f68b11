"""`tokentop report FILE -o report.html [--png DIR]`: a session recording, or a `tokentop bench -o json`
result, as one HTML page to paste into a pull request, a slide or a chat.

The page opens offline: figures are inline SVG drawn by matplotlib, the style sheet is inline, and it
has no script and no link out. A session's numbers come from the fold replay uses (tui_app.commands.replay)
and its table from the runs table's own columns, so the report cannot disagree with the app.
matplotlib is imported only here, so the app's start-up does not pay for it.
"""

from __future__ import annotations

import html
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from monitors.files import write_error, write_whole
from tui_app.core import fmt

MIB = 2**20
# Colours that stay apart in print and for the common colour-vision deficiencies (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
REPREFILL = "#D55E00"
LEVER = "#7a4fa0"
LABELLED_RUNS = 24  # beyond this many runs, figures keep their marks but drop the words on them


class ReportError(Exception):
    """Input that cannot be reported on: one line that says why."""


@dataclass
class Figure:
    name: str  # file stem for --png and the element id
    title: str
    fig: object  # matplotlib.figure.Figure
    caption: str = ""


@dataclass
class Report:
    title: str
    meta: list[tuple[str, str]]
    figures: list[Figure]
    tables: list[str]  # HTML
    notes: list[str] = field(default_factory=list)


def add_report_args(p) -> None:
    p.add_argument("file", help="a session recording (JSONL) or a `tokentop bench -o json` result")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    p.add_argument("--png", metavar="DIR", default=None, help="also write each figure as a PNG into DIR")


def report_main(args) -> int:
    from tui_app.core.options import EXIT_USAGE

    try:
        report = build(args.file)
        for note in report.notes:
            print(f"tokentop: {note}", file=sys.stderr)
        write_html(report, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
        if args.png:
            for path in write_pngs(report, args.png):
                print(f"wrote {path}", file=sys.stderr)
    except ReportError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def build(path: str) -> Report:
    """The report for FILE, whichever of the two kinds it is (told apart by content, not by name)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReportError(f"{p} is neither a tokentop recording nor a `tokentop bench -o json` result (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # JSON lines: a recording, or nothing we know
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        if data["results"] and all(isinstance(r, dict) and "load" in r for r in data["results"]):
            return serving_bench_report(p, data)
        return bench_report(p, data)
    if data is not None and not (isinstance(data, dict) and "type" in data):
        raise ReportError(f"{p} is neither a tokentop recording nor a `tokentop bench -o json` result")
    return session_report(p)


# ------------------------------------------------------------------ a session


def session_report(p: Path) -> Report:
    from monitors.events import Phase, Step
    from monitors.record import read_recording
    from tui_app.commands.replay import fold
    from tui_app.core.session import HISTORY, PREPARATION_PHASES

    rec = read_recording(p, skip_unknown=True)
    if not rec.events:
        raise ReportError(rec.error or f"{p} holds no tokentop events")
    # Every token of the file on the charts, not only the app's last HISTORY.
    points = sum(max(ev.n_tokens, 1) for ev in rec.events if isinstance(ev, Step))
    session = fold(rec.events, history=max(HISTORY, points + len(rec.events)))
    if not session.timer.runs:
        raise ReportError(f"{p} holds no runs to report (only {len(rec.events)} other events)")
    notes = []
    if rec.error:
        notes.append(f"{rec.error}: the report shows those")
    if rec.skipped:
        notes.append("left out, not drawn by this version: " + ", ".join(f"{n} {kind}" for kind, n in sorted(rec.skipped.items())))
    phases = [ev for ev in rec.events if isinstance(ev, Phase) and ev.done and ev.name in PREPARATION_PHASES and ev.seconds > 0]
    figures = [latency_figure(session), ttft_figure(session), kv_figure(session), memory_figure(session, phases), util_figure(session, phases)]
    if session.xray.runs:
        figures.append(xray_figure(session))
    return Report(f"tokentop session — {p.name}", session_meta(session, rec.events), figures, [runs_table_html(session)], notes)


def session_meta(session, events) -> list[tuple[str, str]]:
    r = session.ready
    meta = []
    if r is not None:
        meta += [
            ("model", f"{r.model} ({r.n_params / 1e6:.0f}M params, {fmt.nbytes(r.weight_bytes)} weights)"),
            ("device", f"{fmt.where(r)}, {r.dtype}, {r.threads} threads"),
        ]
    span = (events[-1].t_ns - events[0].t_ns) / 1e9
    meta += [("runs", str(len(session.timer.runs))), ("events", str(len(events))), ("span", f"{fmt.num(span)} s")]
    if session.verdict is not None:
        meta.append(("engine memory", session.verdict.text()))
    if session.device_verdicts:
        meta.append(("device memory", session.device_leak_text()))
    if session.fatal:
        meta.append(("engine error", session.fatal))
    return meta


def _run_spans(session) -> list[tuple[int, int, str]]:
    """(first token index, end index, levers label) of every lever segment of every run, from the
    run and lever markers the session placed on the latency history."""
    marks = sorted(session.markers, key=lambda m: m.index)
    starts = [m for m in marks if m.label.startswith("run ")]
    spans = []
    for k, start in enumerate(starts):
        end = starts[k + 1].index if k + 1 < len(starts) else session.token_count
        run_id = int(start.label.split()[1])
        rec = session.timer.runs.get(run_id)
        bounds = [start.index] + [m.index for m in marks if not m.label.startswith("run ") and start.index < m.index < end] + [end]
        for seg in range(len(bounds) - 1):
            levers = rec.segments[min(seg, len(rec.segments) - 1)].levers.label() if rec else "?"
            if bounds[seg + 1] > bounds[seg]:
                spans.append((bounds[seg], bounds[seg + 1], levers))
    return spans


def latency_figure(session) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 3.8), layout="constrained")
    ax = fig.add_subplot()
    pts = list(session.latency)
    steady = [p for p in pts if p.kind in ("decode", "verify")]
    spans = _run_spans(session)
    colour = {}
    for _, _, label in spans:
        colour.setdefault(label, PALETTE[len(colour) % len(PALETTE)])
    top = max((p.seconds * 1000 for p in steady), default=1.0) * 1.25
    for k, (lo, hi, label) in enumerate(spans):
        ax.axvspan(lo - 0.5, hi - 0.5, color=colour[label], alpha=0.07 if k % 2 else 0.13, lw=0)
        seg = [p for p in steady if lo <= p.index < hi]
        ax.plot([p.index for p in seg], [p.seconds * 1000 for p in seg], ".-", ms=3, lw=0.8, color=colour[label], label=label)
    # Past a few dozen runs the labels would overlap into a smear: the lines stay, the words go.
    words = len(session.timer.runs) <= LABELLED_RUNS
    for p in pts:
        if p.kind in ("prefill", "reprefill"):
            re = p.kind == "reprefill"
            ax.axvline(p.index, color=REPREFILL if re else "#555555", lw=1.2 if re else 0.8, ls="-" if re else ":")
            if words or re:
                ax.annotate(
                    f"{'re-prefill' if re else 'TTFT'} {p.seconds * 1000:.0f} ms",
                    (p.index, top),
                    xytext=(3, -3),
                    textcoords="offset points",
                    va="top",
                    fontsize=7,
                    rotation=90,
                    color=REPREFILL if re else "#333333",
                )
    for m in session.markers:
        if not m.label.startswith("run "):
            ax.axvline(m.index - 0.5, color=LEVER, lw=1, ls="--")
            ax.annotate(m.label, (m.index - 0.5, 0), xytext=(3, 3), textcoords="offset points", fontsize=7, color=LEVER, rotation=90)
    ax.set_ylim(0, top)
    ax.set_xlabel("token (session order)")
    ax.set_ylabel("inter-token latency (ms)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="levers", title_fontsize=8)
    n_re = sum(1 for p in pts if p.kind == "reprefill")
    caption = (
        f"{len(steady)} decode tokens over {len(session.timer.runs)} runs; background and colour: the lever setting of each segment; "
        f"dashed lines: lever switches; {n_re} re-prefill{'s' if n_re != 1 else ''} (red) and each run's prefill (dotted) are marked, "
        "not drawn to scale, since one is often ten decode steps long."
    )
    return Figure("latency", "Per-token latency", fig, caption)


def ttft_figure(session) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    rows = [r for r in session.rows(limit=len(session.timer.runs)) if r.segment is None]
    fig = MplFigure(figsize=(10, 3.2), layout="constrained")
    ax = fig.add_subplot()
    ttft = [r.stats.ttft_s * 1000 if not math.isnan(r.stats.ttft_s) else 0.0 for r in rows]
    if len(rows) <= LABELLED_RUNS:
        xs = list(range(len(rows)))
        bars = ax.bar(xs, ttft, color=PALETTE[0])
        ax.bar_label(bars, labels=[fmt.ms(r.stats.ttft_s, 0, unit=False) for r in rows], fontsize=8, padding=2)
        ax.set_xticks(xs, [f"run {r.label}\n{r.stats.levers.label()}\n{r.stats.prompt_tokens} tok" for r in rows], fontsize=7)
    else:
        ax.bar([r.run_id for r in rows], ttft, color=PALETTE[0])
        ax.set_xlabel("run")
    ax.set_ylabel("TTFT (ms)")
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.15)
    caption = "Time to first token of each run: from the run's start (prompt tokenized) to the end of its prefill; below each bar its levers and prompt length."
    return Figure("ttft", "TTFT per run", fig, caption)


def kv_figure(session) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 3.2), layout="constrained")
    ax = fig.add_subplot()
    pts = [p for p in session.kv if p.seq_len and p.measured]
    r = session.ready
    if pts and r is not None:
        xs = [p.seq_len for p in pts]
        ax.plot(xs, [p.formula / MIB for p in pts], "s", ms=6, mfc="none", color=PALETTE[1], label="formula")
        ax.plot(xs, [p.measured / MIB for p in pts], ".", ms=4, color=PALETTE[0], label="measured (cache tensors)")
        if any(p.alloc > p.measured for p in pts):
            ax.plot(xs, [p.alloc / MIB for p in pts], "_", color=PALETTE[2], label="allocated (static cache)")
        ax.legend(fontsize=8)
        worst = max(abs(p.measured - p.formula) for p in pts)
        caption = (
            f"KV cache bytes at each step, read from the cache's tensors, over the formula "
            f"2 × {r.kv_bytes_per_elem} B × batch × seq_len × {r.n_layers} layers × {r.kv_heads} kv heads × {r.head_dim}; "
            f"{len(pts)} steps, largest difference {fmt.nbytes(worst)}."
        )
    else:
        ax.text(0.5, 0.5, "no KV cache in this recording (cache off, or no engine description)", ha="center", va="center", transform=ax.transAxes)
        caption = "No step of this recording held a KV cache."
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("KV cache (MiB)")
    ax.grid(alpha=0.3)
    return Figure("kv", "KV cache growth: measured against the formula", fig, caption)


def _t0(session) -> int:
    times = [s.t_ns for s in session.samples] + [rec.started.t_ns for rec in session.timer.runs.values()]
    return min(times)


def _run_ends(ax, session, t0: int, phases) -> None:
    """Run ends as dotted lines; preparation phases (load, quantize, compile) as grey spans, since
    they explain a jump in memory or a stretch of busy CPU with no tokens."""
    for k, t in enumerate(session.run_marks):
        ax.axvline((t - t0) / 1e9, color="#777777", lw=0.8, ls=":", label="run end" if k == 0 else None)
    for k, ph in enumerate(phases):
        end = (ph.t_ns - t0) / 1e9
        ax.axvspan(end - ph.seconds, end, color="#999999", alpha=0.18, lw=0, label="preparation" if k == 0 else None)
        ax.annotate(ph.name, (end - ph.seconds, 1), xycoords=("data", "axes fraction"), xytext=(2, -2), textcoords="offset points", va="top", fontsize=7)


def memory_figure(session, phases=()) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 5.6), layout="constrained")
    ax, trend_ax = fig.subplots(2, 1, height_ratios=[3, 2])
    t0 = _t0(session)
    samples = list(session.samples)
    ts = [(s.t_ns - t0) / 1e9 for s in samples]

    def line(attr, label, colour):
        ys = [getattr(s, attr) / MIB if getattr(s, attr) is not None else math.nan for s in samples]
        if any(not math.isnan(y) for y in ys):
            ax.plot(ts, ys, lw=1.2, color=colour, label=label)

    line("engine_rss", "server RSS" if session.servers else "engine RSS", PALETTE[0])
    line("app_rss", "UI RSS", PALETTE[1])
    line("gpu_proc_mem", "GPU (process)", PALETTE[2])
    line("gpu_mem_used", "GPU (device)", PALETTE[3])
    torch_mem = list(session.torch_mem)
    if torch_mem:
        tt = [(m.t_ns - t0) / 1e9 for m in torch_mem]
        ax.plot(tt, [m.allocated / MIB for m in torch_mem], lw=1, color=PALETTE[4], label="torch allocated")
        ax.plot(tt, [m.reserved / MIB for m in torch_mem], lw=1, ls="--", color=PALETTE[4], label="torch reserved")
    _run_ends(ax, session, t0, phases)
    # A server elsewhere that exports no RSS has no baseline to draw.
    finished = sorted(
        (rec.finished for rec in session.timer.runs.values() if rec.finished is not None and rec.finished.baseline_rss is not None), key=lambda f: f.t_ns
    )
    ax.plot([(f.t_ns - t0) / 1e9 for f in finished], [f.baseline_rss / MIB for f in finished], "o", ms=4, color="#000000", label="engine baseline")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if not samples:
        ax.set_title("no sampler readings in this recording: run ends and baselines only", fontsize=9)
    # Below, on a scale of its own: the baselines run by run, where a leak of a MiB a run is visible.
    trend_ax.plot([f.run_id for f in finished], [f.baseline_rss / MIB for f in finished], "o", ms=4, color="#000000", label="engine baseline after the run")
    verdict = session.verdict
    base = list(session.leak.baselines)
    if verdict is not None and verdict.status != "collecting" and len(base) >= 2:
        # The leak detector's own fit: its baselines are the last len(base) finished runs, one x step per run.
        xs = [f.run_id for f in finished[-len(base) :]]
        mid, ym = (len(base) - 1) / 2, sum(base) / len(base)
        for slope, style, label in ((verdict.mb_per_run, "-", "leak trend"), (verdict.low, ":", "95% interval of its slope"), (verdict.high, ":", None)):
            trend_ax.plot(xs, [ym + slope * (i - mid) for i in range(len(base))], style, color=REPREFILL, lw=1.4, label=label)
    trend_ax.set_xlabel("run")
    trend_ax.set_ylabel("baseline MiB")
    trend_ax.grid(alpha=0.3)
    trend_ax.legend(fontsize=8, loc="best")
    text = verdict.text() if verdict is not None else "leak: no finished run"
    gpu = f"; {session.device_leak_text()}" if session.device_verdicts else ""
    caption = (
        "Above: memory of the engine and UI processes over time, run ends dotted, preparation phases shaded. "
        f"Below: the engine's baseline (its memory once a run has ended), run by run, and the leak detector's fit over the runs after its warm-up: {text}{gpu}."
    )
    return Figure("memory", "Memory over time and the leak trend", fig, caption)


def util_figure(session, phases=()) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(10, 3.2), layout="constrained")
    ax = fig.add_subplot()
    t0 = _t0(session)
    samples = list(session.samples)
    ts = [(s.t_ns - t0) / 1e9 for s in samples]
    drawn = 0
    series = (("engine_cpu", "engine CPU%"), ("sys_cpu", "system CPU%"), ("app_cpu", "UI CPU%"), ("gpu_sm", "GPU SM%"), ("gpu_mem_util", "GPU mem%"))
    for k, (attr, label) in enumerate(series):
        ys = [getattr(s, attr) if getattr(s, attr) is not None else math.nan for s in samples]
        if any(not math.isnan(y) for y in ys):
            ax.plot(ts, ys, lw=1.2, color=PALETTE[k], label=label)
            drawn += 1
    reads = list(session.mem_read)[-len(samples) :] if samples else []
    if any(r is not None for r in reads):
        ax.plot(ts, [math.nan if r is None else r * 100 for r in reads], lw=1.2, color=PALETTE[5], label="mem bw%")
    _run_ends(ax, session, t0, phases)
    if not samples:
        ax.text(0.5, 0.5, "no sampler readings in this recording", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("%")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    gpu = next((s.gpu_reason for s in reversed(samples) if s.gpu_reason), "")
    busy = any(s.gpu_mem_util is not None for s in samples)
    bw = session.bandwidth
    caption = (
        f"CPU use of the engine process (100% = one core), the UI process and the whole system, from {len(samples)} sampler readings."
        + (f" GPU: {gpu}." if gpu else "")
        + (" GPU mem%: NVML's share of time the device memory was read or written, not a share of its bandwidth." if busy else "")
        + (
            f" mem bw%: the bytes decode steps read (the weights once a step, the KV cache at its length) per second, as a % of {bw.source} "
            f"({bw.read_bps / 1e9:.1f} GB/s when last measured)."
            if bw is not None and any(r is not None for r in reads)
            else ""
        )
    )
    return Figure("utilization", "Utilization", fig, caption)


def runs_table_html(session) -> str:
    from tui_app.ui.widgets.runs_table import COLUMNS

    head = "".join(f"<th>{html.escape(c.title)}</th>" for c in COLUMNS)
    body = []
    for row in session.rows(limit=len(session.timer.runs)):
        cls = ' class="segment"' if row.segment is not None else ""
        cells = "".join(f'<td class="{"l" if c.left else "r"}">{html.escape(c.cell(row))}</td>' for c in COLUMNS)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<h2>Runs</h2><table id="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# ------------------------------------------------------------------ a bench


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


# ------------------------------------------------------------------ request X-ray

CLOCK_RULE = "durations are the server's own; each bar is placed from the client's send"


def _phase_bars(ax, rows: list[tuple[float, list[tuple[str, float, float]]]]) -> None:
    """Horizontal bars, one row per (send time, phases): one barh call per phase, so a bench of
    thousands of requests draws in a moment."""
    from monitors.xray import PHASE_LABELS
    from tui_app.ui.widgets.waterfall import PHASE_COLOURS

    names = [*PHASE_LABELS, "unaccounted"]
    for name in names:
        ys, lefts, widths = [], [], []
        for y, (sent, bars) in enumerate(rows):
            for phase, a, b in bars:
                if phase == name:
                    ys.append(y)
                    lefts.append(sent + a)
                    widths.append(b - a)
        if ys:
            label = "no server account" if name == "unaccounted" else PHASE_LABELS[name]
            ax.barh(ys, widths, left=lefts, height=0.8, color=PHASE_COLOURS[name], label=label, lw=0)


def xray_figure(session) -> Figure:
    """The waterfall of the session's run with the most streams (the latest of those)."""
    from matplotlib.figure import Figure as MplFigure

    run_id = max(session.xray.run_ids(), key=lambda rid: (len(session.xray.requests(rid)), rid))
    reqs = session.xray.requests(run_id)
    fig = MplFigure(figsize=(10, 1.2 + 0.28 * len(reqs)), layout="constrained")
    ax = fig.add_subplot()
    _phase_bars(ax, [(0.0, r.bars()) for r in reqs])
    for y, r in enumerate(reqs):
        ax.plot(r.mark_offsets(), [y] * len(r.marks), "|", color="#000000", ms=7, mew=0.8, label="client chunk" if y == 0 else None)
    ax.set_yticks(range(len(reqs)), [f"stream {r.segment} · {r.trace_id[:8]}" for r in reqs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the client's send")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    sources = sorted({r.server.source for r in reqs if r.server is not None and r.server.phases})
    notes = sorted({r.note for r in reqs if r.note})
    caption = (
        f"Run {run_id}: {len(reqs)} streams; the server's phases from {', '.join(sources) or 'no server account'}, "
        f"the client's chunk arrivals over them; {CLOCK_RULE}." + (f" {notes[0]}" if notes else "")
    )
    return Figure("xray", f"Request X-ray of run {run_id}", fig, caption)


def timeline_figure(data: dict) -> Figure:
    """Every request of a serving bench, one row each in send order, its phases coloured: queueing
    under load shows as orange growing down the rows."""
    from matplotlib.figure import Figure as MplFigure

    from monitors.xray import lay_out

    rows: list[tuple[float, list[tuple[str, float, float]]]] = []
    offset = 0.0
    bounds = []
    for cell, reqs in zip(data["results"], data.get("requests") or [], strict=False):
        for r in sorted(reqs, key=lambda r: r["sent_s"]):
            x = r.get("xray") or {}
            phases = {k.removeprefix("server_").removesuffix("_s"): v for k, v in x.items() if k.startswith("server_") and k.endswith("_s") and v is not None}
            rows.append((offset + r["sent_s"], lay_out(phases, r.get("e2e_s"))))
        bounds.append((len(rows), offset, f"{cell['server']} {cell['load']} {cell['prompt_tokens']}→{cell['new_tokens']}"))
        offset += cell.get("wall_s") or 0.0
    fig = MplFigure(figsize=(10, min(2 + 0.06 * len(rows), 14)), layout="constrained")
    ax = fig.add_subplot()
    _phase_bars(ax, rows)
    start = 0
    for end, at, label in bounds:
        ax.axhline(end - 0.5, color="#777777", lw=0.6, ls=":")
        ax.annotate(label, (at, start), xytext=(2, -2), textcoords="offset points", va="top", fontsize=7, color="#333333")
        start = end
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_ylabel("request (send order)")
    ax.set_xlabel("seconds (each cell from its first send, cells one after another)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    with_span = sum(1 for reqs in data.get("requests") or [] for r in reqs if (r.get("xray") or {}).get("server_source") == "otlp")
    caption = (
        f"{len(rows)} requests, {with_span} with a server span; each bar from its send: the server's own phases "
        f"(its span's gen_ai.latency.* or its response's timings), then the client's time outside them; {CLOCK_RULE}."
    )
    return Figure("timeline", "Every request of the bench, in send order", fig, caption)


def serving_bench_report(p: Path, data: dict) -> Report:
    rows = data["results"]
    env = data.get("environment") or {}
    servers = "; ".join(f"{s.get('label')} ({s.get('engine')} {s.get('model')}, {s.get('url')})" for s in env.get("servers") or [])
    meta = [("servers", servers or "?"), ("taken", str(env.get("date", "?"))), ("cells", str(len(rows)))]
    head = ["server", "load", "prompt→new", "requests", "TTFT ms p50 / p99", "e2e ms p50", "queue ms mean / p99", "prefill ms mean", "decode ms mean"]
    head.append("outside TTFT ms p50")
    body = []
    for r in rows:
        cells = [
            str(r["server"]),
            str(r["load"]),
            f"{r['prompt_tokens']}→{r['new_tokens']}",
            f"{r['requests']}" + (f" ({r['failed']} failed)" if r.get("failed") else ""),
            f"{fmt.ms(r.get('ttft_p50_s'), 0, unit=False)} / {fmt.ms(r.get('ttft_p99_s'), 0, unit=False)}",
            fmt.ms(r.get("e2e_p50_s"), 0, unit=False),
            f"{fmt.ms(r.get('server_queue_mean_s'), 1, unit=False)} / {fmt.ms(r.get('server_queue_p99_s'), 1, unit=False)}",
            fmt.ms(r.get("server_prefill_mean_s"), 1, unit=False),
            fmt.ms(r.get("server_decode_mean_s"), 1, unit=False),
            fmt.ms(r.get("overhead_ttft_p50_s"), 1, unit=False),
        ]
        body.append("<tr>" + "".join(f'<td class="{"l" if i < 2 else "r"}">{html.escape(c)}</td>' for i, c in enumerate(cells)) + "</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    table = f'<h2>Cells</h2><table id="cells"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return Report(f"tokentop serving bench — {p.name}", meta, [timeline_figure(data)], [table])


# ------------------------------------------------------------------ output

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; margin: 2em auto; max-width: 1100px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.4em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; margin: 0.6em 0 1em; }
dl.meta dt { color: #666; }
dl.meta dd { margin: 0; }
p.note { background: #fff4e5; border-left: 4px solid #E69F00; padding: 0.4em 0.8em; }
figure { margin: 0 0 1.2em; }
figure svg { width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.92em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.9em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e3e3e3; white-space: nowrap; }
th { text-align: right; border-bottom: 2px solid #999; }
th:first-child, td.l { text-align: left; }
td.r { text-align: right; }
tr.segment td { color: #777; }
tr.segment td:first-child { padding-left: 1.6em; }
footer { color: #888; font-size: 0.85em; margin-top: 2em; }
"""


def svg_of(figure: Figure) -> str:
    import matplotlib

    buf = io.StringIO()
    # Text as paths: the page needs no font; a salt per figure keeps element ids unique on the page.
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": figure.name}):
        figure.fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def render(report: Report) -> str:
    meta = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in report.meta)
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in report.notes)
    figures = "".join(
        f'<figure id="{f.name}"><h2>{html.escape(f.title)}</h2>{svg_of(f)}<figcaption>{html.escape(f.caption)}</figcaption></figure>' for f in report.figures
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{html.escape(report.title)}</h1><dl class="meta">{meta}</dl>{notes}{figures}{"".join(report.tables)}'
        "<footer>made by <code>tokentop report</code></footer></body></html>\n"
    )


def write_html(report: Report, path: str) -> None:
    text = render(report)
    try:
        write_whole(path, text)
    except OSError as exc:
        raise ReportError(f"{path} not written: {write_error(exc, path)}") from None


def write_pngs(report: Report, folder: str) -> list[Path]:
    out = Path(folder)
    paths = []
    path = out
    try:
        out.mkdir(parents=True, exist_ok=True)
        for f in report.figures:
            path = out / f"{f.name}.png"
            buf = io.BytesIO()
            f.fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
            write_whole(path, buf.getvalue())
            paths.append(path)
    except OSError as exc:
        raise ReportError(f"the PNGs were not written into {out}: {write_error(exc, path)}") from None
    return paths
