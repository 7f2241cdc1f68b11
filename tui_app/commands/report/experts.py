"""An MoE session's routing in the report: the last run's layers × experts heatmap (each cell the
expert's share of its layer's positions) and a table of each run's load, from RunFinished.expert_counts."""

from __future__ import annotations

import html

from monitors.routing import idle_share, run_load
from tui_app.commands.report.page import Figure


def _routed(session) -> list:
    return [rec.finished for rec in session.timer.runs.values() if rec.finished is not None and rec.finished.expert_counts]


def counted_by(session) -> str:
    """Whose count the session's routing is: a server's recorder, a watched script's hook, or the engine's."""
    ready = session.ready
    if ready is not None and ready.server:
        return f"as {ready.server.get('engine') or 'the server'}'s expert recorder counted them: every client's requests over the run's span"
    if ready is not None and ready.source.startswith("the script"):
        return "as the hook counted them in the script's process (a hook on each layer's experts module, read at each generate's end)"
    return "as the engine counted them on the device (a hook on each layer's experts module)"


def experts_figure(session) -> Figure | None:
    from matplotlib import colormaps
    from matplotlib.figure import Figure as MplFigure

    runs = _routed(session)
    if not runs:
        return None
    last = runs[-1]
    shares = [[c / (sum(layer) or 1) for c in layer] for layer in last.expert_counts]
    fig = MplFigure(figsize=(10, 0.8 + 0.25 * len(shares)), layout="constrained")
    ax = fig.add_subplot()
    # Vector cells in ten colours: imshow, or a colour bar of more than 50 steps, would embed a PNG in the page's SVG.
    image = ax.pcolormesh(shares, cmap=colormaps["viridis"].resampled(10))
    ax.invert_yaxis()  # layer 0 on top, as in the app's pane
    ax.set_xlabel("routed expert")
    ax.set_ylabel("MoE layer")
    fig.colorbar(image, ax=ax, label="share of the layer's positions")
    caption = (
        f"Run {last.run_id}: each MoE layer's positions (prompt and generated, every batch row) by the routed expert they went to, "
        f"{counted_by(session)}. An even router gives every cell 1/experts."
    )
    return Figure("experts", "Experts per layer", fig, caption)


def experts_table_html(session) -> str:
    runs = _routed(session)
    if not runs:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("run", "layers × experts", "max/mean, mean of layers", "worst layer", "never chosen"))
    body = []
    for fin in runs:
        counts = fin.expert_counts
        load = run_load(counts)
        cells = (
            str(fin.run_id),
            f"{len(counts)} × {len(counts[0])}",
            f"{load[0]:.2f}" if load else "–",
            f"layer {load[1]}: {load[2]:.2f}" if load else "–",
            f"{sum(idle_share(layer) for layer in counts) / len(counts):.0%}",
        )
        body.append("<tr>" + "".join(f'<td class="r">{html.escape(c)}</td>' for c in cells) + "</tr>")
    return f'<h2>Experts</h2><table id="experts"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
