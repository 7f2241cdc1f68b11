"""A session recording's report: the figures of its runs (per-token latency, TTFT, KV cache,
memory and the leak trend, utilization) and the runs table, from the fold the app uses."""

from __future__ import annotations

import html
import math
from pathlib import Path

from monitors.leaks import fit_fan
from tui_app.commands.report.experts import experts_figure, experts_table_html
from tui_app.commands.report.page import LABELLED_RUNS, LEVER, MIB, PALETTE, REPREFILL, Figure, Report, ReportError
from tui_app.commands.report.xray import xray_figure
from tui_app.core import fmt, readings


def session_report(p: Path) -> Report:
    from monitors.events import Phase, Step
    from monitors.record import read_recording
    from tui_app.core.session import HISTORY, PREPARATION_PHASES, Session

    rec = read_recording(p, skip_unknown=True)
    if not rec.events:
        raise ReportError(rec.error or f"{p} holds no tokentop events")
    # Every token of the file on the charts, not only the app's last HISTORY.
    points = sum(max(ev.n_tokens, 1) for ev in rec.events if isinstance(ev, Step))
    session = Session.from_events(rec.events, history=max(HISTORY, points + len(rec.events)))
    if not session.timer.runs and session.fleet is None:
        raise ReportError(f"{p} holds no runs and no fleet to report (only {len(rec.events)} other events)")
    notes = []
    if rec.error:
        notes.append(f"{rec.error}: the report shows those")
    if rec.skipped:
        notes.append("left out, not drawn by this version: " + ", ".join(f"{n} {kind}" for kind, n in sorted(rec.skipped.items())))
    phases = [ev for ev in rec.events if isinstance(ev, Phase) and ev.done and ev.name in PREPARATION_PHASES and ev.seconds > 0]
    figures, tables = [], []
    if session.timer.runs:  # a fleet watched with --watch has none of tokentop's own
        figures = [latency_figure(session), ttft_figure(session), kv_figure(session), memory_figure(session, phases), util_figure(session, phases)]
        tables = [runs_table_html(session)]
        if (experts := experts_figure(session)) is not None:  # an MoE's
            figures.append(experts)
            tables.append(experts_table_html(session))
    if session.xray.runs:
        figures.append(xray_figure(session))
    if session.fleet is not None:
        figures.append(fleet_figure(session))
        tables.append(fleet_table_html(session))
    return Report(f"tokentop session — {p.name}", session_meta(session, rec.events), figures, tables, notes)


def session_meta(session, events) -> list[tuple[str, str]]:
    r = session.ready
    meta = []
    if r is not None and r.dtype != "fleet":  # a fleet watched with --watch stands in no model
        meta += [
            ("model", f"{r.model} ({r.n_params / 1e6:.0f}M params, {fmt.nbytes(r.weight_bytes)} weights)"),
            ("device", f"{fmt.where(r)}, {r.dtype}, {r.threads} threads"),
        ]
    f = session.fleet_ready
    if f is not None:
        watch = ", tokentop sent nothing (--watch)" if f.watch else ""
        meta.append(("fleet", f"Prometheus {f.version} at {f.url}, replicas {f.selector}, rates over {f.window_s:g} s{watch}"))
    span = (events[-1].t_ns - events[0].t_ns) / 1e9
    meta += [("runs", str(len(session.timer.runs))), ("events", str(len(events))), ("span", f"{fmt.num(span)} s")]
    if session.verdict is not None:
        meta.append(("engine memory", session.verdict.text()))
    if session.device_verdicts:
        meta.append(("device memory", readings.device_leak_text(session)))
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
        xs = (finished[-len(base)].run_id, finished[-1].run_id)
        for ys, style, label in zip(fit_fan(base, verdict), ("-", ":", ":"), ("leak trend", "95% interval of its slope", None), strict=True):
            trend_ax.plot(xs, ys, style, color=REPREFILL, lw=1.4, label=label)
    trend_ax.set_xlabel("run")
    trend_ax.set_ylabel("baseline MiB")
    trend_ax.grid(alpha=0.3)
    trend_ax.legend(fontsize=8, loc="best")
    text = verdict.text() if verdict is not None else "leak: no finished run"
    gpu = f"; {readings.device_leak_text(session)}" if session.device_verdicts else ""
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
    series = (("engine_cpu", "engine CPU%"), ("sys_cpu", "system CPU%"), ("app_cpu", "UI CPU%"), ("gpu_sm", "GPU busy%"), ("gpu_mem_util", "GPU mem%"))
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
    from tui_app.core.columns import columns_for

    rows = session.rows(limit=len(session.timer.runs))
    columns = columns_for(rows)
    head = "".join(f"<th>{html.escape(c.title)}</th>" for c in columns)
    body = []
    for row in rows:
        cls = ' class="segment"' if row.segment is not None else ""
        cells = "".join(f'<td class="{"l" if c.left else "r"}">{html.escape(c.cell(row))}</td>' for c in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<h2>Runs</h2><table id="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def fleet_figure(session) -> Figure:
    """The fleet's generated tokens/s and requests running and waiting over the session, the
    backfill included, each refresh at Prometheus' own evaluation time."""
    from matplotlib.figure import Figure as MplFigure

    history = list(session.fleet_history)
    t0 = history[0][0]
    fig = MplFigure(figsize=(9, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    for k, (key, label) in enumerate((("gen_tps", "generated tok/s"), ("running", "running"), ("waiting", "waiting"))):
        pts = [(t - t0, f[key]) for t, f in history if f.get(key) is not None]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], color=PALETTE[k], label=label, linewidth=1.2)
    ax.set_xlabel("seconds")
    ax.legend(loc="upper left", fontsize=8)
    ready = session.fleet_ready
    caption = f"From Prometheus at {ready.url}, replicas {ready.selector}, rates over {ready.window_s:g} s." if ready else ""
    return Figure("fleet", "Fleet", fig, caption)


def fleet_table_html(session) -> str:
    from tui_app.core.fleet import COLUMNS, energy_text, table

    sample = session.fleet
    grid = table(sample)
    head = "".join(f"<th>{html.escape(c)}</th>" for c, _ in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in grid[1:])
    return f'<h2>Fleet</h2><p>{html.escape(energy_text(sample.fleet))}</p><table id="fleet"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
