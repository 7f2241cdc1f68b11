"""An attached server's own figures (from its /metrics, or its stream's timings): KV-cache usage
over time as a chart, then one line per figure, each naming the metric it came from."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from monitors.servers import FIGURE_LABELS
from tui_app.core.braille import plot
from tui_app.core.fmt import figure_text
from tui_app.ui.widgets.chart import Chart

# The order figures are listed in; a figure the server does not export is left out.
ORDER = ("running", "waiting", "ttft", "itl", "e2e", "gen_tps", "prompt_tps", "prefix_hit", "spec_accept", "preemptions", "rss")


class ServerPane(Chart):
    MAX_HZ = Chart.SAMPLED_HZ

    def draw(self, width: int, height: int) -> list[Strip]:
        s = self.session
        server = s.active_server() or {}
        label = server.get("label", "")
        self.border_title = f"server — {server.get('engine', '?')}" + (f" {label}" if len(s.servers) > 1 else "")
        samples = [x for x in s.server if x.server == label or not x.server]
        errors = [x.error for x in samples if x.error]
        latest = next((x for x in reversed(samples) if not x.error), None)
        dim, bold = Style(dim=True), Style(bold=True)
        lines: list[Strip] = []
        if latest is not None:
            for key in ORDER:
                value = latest.values.get(key)
                if value is None:
                    continue
                text = figure_text(key, value) + "  "  # the gap ends this run: SVG drops a run's leading spaces
                source = latest.sources.get(key, "")
                room = width - len(text)
                if len(source) > room:
                    source = source[: max(room - 1, 0)] + "…" if room > 8 else ""
                lines.append(Strip([Segment(text, bold), Segment(source, dim)]).crop(0, width))
        if errors and (latest is None or samples[-1].error):
            lines.append(Strip([Segment(errors[-1], Style(color="yellow"))]).crop(0, width))
        chart_h = height - len(lines)
        kv = [x for x in samples[-(width * 2) :] if x.values.get("kv_usage") is not None]
        if not kv:
            note = server.get("kv_note") or "waiting for the server's KV figure…"
            self.border_subtitle = ""
            head = [Strip([Segment(f"KV cache: {note}", dim)]).crop(0, width)]
            return (head + lines)[:height]
        if chart_h < 3:  # too small for a chart: the figures alone
            lines.insert(0, Strip([Segment(figure_text("kv_usage", kv[-1].values["kv_usage"]), bold)]))
            return lines[:height]
        canvas = self.canvas(width - self.AXIS, chart_h - 1)
        t0, t1 = kv[0].t_ns, max(kv[-1].t_ns, kv[0].t_ns + 1)
        pct = [x.values["kv_usage"] * 100 for x in kv]
        plot(canvas, [pct], 0.0, 100.0, xs=[[x.t_ns for x in kv]], x_lo=t0, x_hi=t1)
        last = kv[-1]
        self.border_subtitle = f"{FIGURE_LABELS['kv_usage']} {last.values['kv_usage'] * 100:.0f}%"
        chart = self.compose_text(canvas, 0.0, 100.0, lambda v: f"{v:.0f}%", [(f"KV usage: {last.sources.get('kv_usage', '')}", 0)])
        return chart + lines
