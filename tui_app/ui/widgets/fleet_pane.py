"""The fleet, read through Prometheus: the fleet's recent past as sparklines (the backfill first),
its energy where a DCGM exporter reports it, then a row per replica and the fleet's row. Rows
with a hot spot (down, KV full, waiting while others idle, a p99 far from the fleet's) are
coloured and, when they do not all fit, listed first."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from tui_app.core import fmt
from tui_app.core.fleet import COLUMNS, energy_text, fmt_age, table
from tui_app.ui.widgets.pane import LinePane

BARS = "▁▂▃▄▅▆▇█"
# Columns left out first when the pane is narrow (by index in COLUMNS): prefix, preempt, prompt, ITL, engine.
DROP = (11, 10, 6, 9, 1)
TRENDS = (("gen_tps", "gen tok/s", lambda v: fmt.num(v, 1)), ("ttft", "TTFT p99", lambda v: fmt.ms(v, 0)), ("waiting", "waiting", lambda v: fmt.num(v, 0)))


def sparkline(values: list[float | None], width: int) -> str:
    vals = values[-width:]
    finite = [v for v in vals if v is not None]
    if not finite:
        return ""
    hi = max(finite) or 1.0
    return "".join(" " if v is None else BARS[min(int(v / hi * (len(BARS) - 1) + 0.5), len(BARS) - 1)] for v in vals)


class FleetPane(LinePane):
    DEFAULT_CSS = """
    FleetPane {
        border: round $primary;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        height: auto;
        max-height: 50%;
    }
    """
    MAX_HZ = 2.0

    def __init__(self, session, *, id: str | None = None):
        super().__init__(id=id)
        self.session = session
        self._lines = 1

    def _trends(self) -> list[tuple[str, str, list]]:
        """(name, the latest value's text, the values) of each trend the fleet has figures for."""
        history = list(self.session.fleet_history)
        out = []
        for key, name, show in TRENDS:
            vals = [(f.get(key) or {}).get("p99") if key == "ttft" else f.get(key) for _, f in history]
            if any(v is not None for v in vals):
                out.append((name, show(vals[-1]), vals))
        return out

    def _wanted(self) -> int:
        """Lines for everything: the error, the trends, energy, the header, the rows, the fleet's."""
        s = self.session
        rows = len(s.fleet.rows) if s.fleet else 0
        return bool(s.fleet_error) + (len(self._trends()) + 3 + rows if s.fleet else 1)

    def get_content_height(self, container, viewport, width: int) -> int:
        """As tall as its rows (max-height caps it; the rows with a hot spot come first then)."""
        return self._lines

    def redraw(self, force: bool = False) -> None:
        if self.dirty and self._wanted() != self._lines:
            self._lines = self._wanted()
            self.refresh(layout=True)
        super().redraw(force)

    def draw(self, width: int, height: int) -> list[Strip]:
        s = self.session
        ready, sample = s.fleet_ready, s.fleet
        dim, bold = Style(dim=True), Style(bold=True)
        if ready is not None:
            self.border_title = f"fleet — Prometheus {ready.version} {ready.url} {ready.selector} · window {fmt_age(ready.window_s)}"
            self.border_subtitle = "tokentop sends nothing (--watch)" if ready.watch else ""
        lines: list[Strip] = []
        if s.fleet_error:
            lines.append(Strip([Segment(s.fleet_error, Style(color="yellow"))]).crop(0, width))
        if ready is None or sample is None:
            lines.append(Strip([Segment("asking Prometheus…", dim)]))
            return lines[:height]
        history = s.fleet_history
        trends = self._trends()
        for name, latest, vals in trends if height >= len(trends) + len(sample.rows) + 3 else trends[:1]:
            span = fmt_age(history[-1][0] - history[0][0]) if len(history) > 1 else "0s"
            head = f"{name} {latest} "
            tail = f" last {span}"
            room = max(width - len(head) - len(tail), 0)
            lines.append(Strip([Segment(head, bold), Segment(sparkline(vals, room), Style(color="cyan")), Segment(tail, dim)]).crop(0, width))
        lines.append(Strip([Segment(energy_text(sample.fleet), dim)]).crop(0, width))
        lines += self._table(sample, width, height - len(lines))
        return lines[:height]

    def _table(self, sample, width: int, room: int) -> list[Strip]:
        grid = table(sample)
        header, body, total = grid[0], grid[1:-1], grid[-1]
        order = sorted(range(len(body)), key=lambda i: not body[i][-1])  # marked rows first when they do not all fit
        keep = list(range(len(COLUMNS)))
        widths = [max(len(r[i]) for r in grid) for i in keep]
        for col in DROP:
            if sum(widths[i] + 2 for i in keep) <= width:
                break
            keep.remove(col)
        left = (0, 1, 2, len(COLUMNS) - 1)

        def strip(cells: list[str], style: Style) -> Strip:
            text = "  ".join(cells[i].ljust(widths[i]) if i in left else cells[i].rjust(widths[i]) for i in keep).rstrip()
            return Strip([Segment(text + " ", style)]).crop(0, width)  # the trailing space ends the run for the SVG

        out = [strip(header, Style(bold=True, underline=True))]
        shown = room - 2
        rows = body if len(body) <= shown else [body[i] for i in sorted(order[: max(shown - 1, 0)])]
        for r in rows:
            marks = r[-1]
            style = Style(color="red", bold=True) if r[2].startswith("down") else Style(color="yellow") if marks else Style()
            out.append(strip(r, style))
        if len(rows) < len(body):
            marked = sum(1 for r in body if r[-1])
            out.append(Strip([Segment(f"… {len(body) - len(rows)} more replicas ({marked} marked in all)", Style(dim=True))]))
        out.append(strip(total, Style(bold=True, color="cyan")))
        return out
