"""The report's picture of a --sweep: for each SLO figure, the throughput–latency curve (one point
a step: its achieved output tok/s, and the figure at the goodput level's percentile, the one that
must stay under the SLO), the SLO as a line, and the headroom's step marked. matplotlib is
imported here only, when a report draws it."""

from __future__ import annotations

from tui_app.commands.report.page import PALETTE, Figure

PASS, FAIL, SLO_LINE, MARK = PALETTE[0], PALETTE[5], "#777777", PALETTE[2]  # the report's Okabe–Ito blue, vermillion, green


def headroom_figure(index: int, verdict: dict) -> Figure:
    """The figure of one server's sweep (sweep.summary's JSON), the `index`-th of the bench's."""
    from matplotlib.figure import Figure as MplFigure

    from tui_app.commands.serving import parse_slo

    steps = verdict["steps"]
    level = verdict["level"]
    slo = parse_slo(verdict["slo"])
    keys = [k for k in ("ttft", "ttfa", "itl", "tpot", "e2e") if any(f"{k}_at_level_s" in s for s in steps)]
    fig = MplFigure(figsize=(10, 3.2 * max(len(keys), 1)), layout="constrained")
    axes = fig.subplots(max(len(keys), 1), 1, squeeze=False)[:, 0]
    best = verdict.get("headroom_rate")
    ci = verdict.get("headroom_ci95")
    for ax, key in zip(axes, keys, strict=False):
        drawn = [s for s in steps if s.get("output_tok_s") is not None and s.get(f"{key}_at_level_s") is not None]
        pts = [(s["output_tok_s"], s[f"{key}_at_level_s"] * 1000, s) for s in drawn]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="#999999", lw=1, zorder=1)
        for x, y, s in pts:
            ax.scatter([x], [y], color=PASS if s["passed"] else FAIL, s=28, zorder=2)
            ax.annotate(f"{s['rate']:g}/s", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7, color="#333333")
        limit = slo.get(key)
        if limit is not None:
            ax.axhline(limit * 1000, color=SLO_LINE, ls="--", lw=1)
            label = f"SLO {key.upper()} {limit * 1000:g} ms"
            ax.annotate(label, (0, limit * 1000), xycoords=("axes fraction", "data"), xytext=(4, 3), textcoords="offset points", fontsize=7, color=SLO_LINE)
        mark = next(((x, y) for x, y, s in pts if s["rate"] == best), None)
        if mark is not None:
            text = f"headroom {best:g} req/s" + (f" ({ci[0]:g}–{ci[1]:g})".replace("(0–", f"(below {steps[0]['rate']:g}–") if ci else "")
            ax.scatter([mark[0]], [mark[1]], s=160, facecolors="none", edgecolors=MARK, linewidths=2, zorder=3)
            ax.annotate(text, mark, xytext=(8, -14), textcoords="offset points", fontsize=8, color=MARK, weight="bold")
        ax.set_ylabel(f"{key.upper()} p{level * 100:g} (ms)")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, max([y for _, y, _ in pts] + [limit * 1000 if limit else 0]) * 1.15 or None)  # room above the SLO line for its label
    axes[-1].set_xlabel("output tok/s achieved (each point a step, labelled with its offered rate)")
    failed = next((s for s in steps if not s["passed"]), None)
    caption = (
        f"{verdict['server']}: {len(steps)} step(s); blue met the SLO for {level * 100:g} % of requests, orange did not"
        + (f" ({failed['stopped']})" if failed and failed.get("stopped") else "")
        + ". "
        + (
            f"The headroom, {best:g} req/s, is the highest rate that met it"
            + (f"; its 95 % interval from the rounds' bootstrap is {ci[0]:g}–{ci[1]:g}." if ci else ".")
            if best is not None
            else "No step met the SLO."
        )
    )
    return Figure(f"headroom-{index}", f"Headroom of {verdict['server']}", fig, caption)
