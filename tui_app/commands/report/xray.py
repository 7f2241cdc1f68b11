"""The X-ray's figures: one run's requests as a waterfall (the server's phases under the client's
chunks), and a serving bench's every request in send order, with its cells' table."""

from __future__ import annotations

import html
from pathlib import Path

from monitors.xray import PHASE_COLOURS, PHASE_LABELS
from tui_app.commands.report.page import Figure, Report
from tui_app.core import fmt

CLOCK_RULE = "durations are the server's own; each bar is placed from the client's send"


def _phase_bars(ax, rows: list[tuple[float, list[tuple[str, float, float]]]]) -> None:
    """Horizontal bars, one row per (send time, phases): one barh call per phase, so a bench of
    thousands of requests draws in a moment."""

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
