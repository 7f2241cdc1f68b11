"""The X-ray waterfall: one run's requests on one time axis, one bar per stream.

Each bar starts at the client's send; its colours are the server's phases laid end to end from
there (monitors/xray.py states the clock rule), then the part of the client's time outside the
server's account; the glyphs over it are the client's chunk arrivals. A stream with no server
account yet is drawn as the client saw it, in grey, with why beside it below.
"""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from monitors.xray import PHASE_COLOURS, PHASE_LABELS, PHASES, RequestXray
from tui_app.core import fmt
from tui_app.ui.widgets.pane import LinePane

MARK = "│"
LABEL_W = 14
SOURCE_NAMES = {"otlp": "OTLP span", "timings": "the response's timings", "usage": "the response's usage (counts only)"}


def axis_end(reqs: list[RequestXray]) -> float:
    """The seconds the axis spans: the latest end of any bar or chunk."""
    ends = [r.bars()[-1][2] for r in reqs if r.bars()] + [r.client_e2e_s or 0.0 for r in reqs]
    return max([e for e in ends if e], default=0.0) or 1.0


def bar_cells(req: RequestXray, width: int, end_s: float) -> list[tuple[str, str | None]]:
    """(glyph, phase) per column of a bar `width` columns wide spanning 0..end_s: the phase at the
    column's middle (None: nothing there), the glyph a chunk mark where a chunk arrived in it."""
    bars = req.bars()
    per = end_s / width
    cells: list[tuple[str, str | None]] = []
    k = 0
    for c in range(width):
        mid = (c + 0.5) * per
        while k < len(bars) and bars[k][2] <= mid:
            k += 1
        phase = bars[k][0] if k < len(bars) and bars[k][1] <= mid else None
        cells.append((" ", phase))
    for t in req.mark_offsets():
        c = min(int(t / per), width - 1) if t >= 0 else 0
        cells[c] = (MARK, cells[c][1])
    return cells


def detail_lines(req: RequestXray) -> list[str]:
    """Every figure of one stream, each with its source."""
    s = req.server
    head = f"stream {req.segment} · trace {req.trace_id} · x-request-id {req.request_id}"
    client = (
        f"client (its own clock, from the send): TTFT {fmt.ms(req.client_ttft_s, 0)}, last chunk {fmt.ms(req.client_e2e_s, 0)}, "
        f"{req.chunks} chunks, {req.tokens} tokens"
    )
    lines = [head, client]
    if s is None or not s.phases:
        lines.append(req.note or "no server account yet" + ("" if req.last_ns else " (in flight)"))
        if s is not None and s.details:
            lines.append("server counts: " + ", ".join(f"{k} {v}" for k, v in s.details.items()))
        return lines
    figures = [f"{PHASE_LABELS.get(name, name)} {fmt.ms(s.phases[name], 1)} [{s.sources.get(name, '?')}]" for name in PHASES if name in s.phases]
    figures += [f"{name} {fmt.ms(s.phases[name], 1)} [{s.sources.get(name, '?')}]" for name in ("ttft", "e2e") if name in s.phases]
    lines.append(f"server ({SOURCE_NAMES.get(s.source, s.source)}" + (f" {s.details['span']}" if s.details.get("span") else "") + "): " + "; ".join(figures))
    counts = {k: v for k, v in req.details.items() if k not in ("span",)}
    overhead = f"outside the server's account: TTFT {fmt.ms(req.overhead_ttft_s, 1)}, e2e {fmt.ms(req.overhead_e2e_s, 1)} (client − server)"
    lines.append(overhead + ("; " + ", ".join(f"{k} {v}" for k, v in counts.items()) if counts else ""))
    if req.note:
        lines.append(req.note)
    return lines


def legend() -> list[tuple[str, Style]]:
    out = []
    for name in (*PHASES, "unaccounted"):
        out.append(("  ", Style(bgcolor=PHASE_COLOURS[name])))
        out.append((f" {'no server account' if name == 'unaccounted' else PHASE_LABELS[name]}  ", Style()))
    out.append((f"{MARK} client chunk", Style(bold=True)))
    return out


class Waterfall(LinePane):
    """The requests of one run of the session's X-ray book."""

    DEFAULT_CSS = """
    Waterfall { height: 1fr; padding: 0 1; }
    """

    def __init__(self, session, run_id: int, *, id: str | None = None):
        super().__init__(id=id)
        self.session = session
        self.run_id = run_id
        self.selected = 0
        self.seen = -1  # the book's version last drawn

    def requests(self) -> list[RequestXray]:
        return self.session.xray.requests(self.run_id)

    def draw(self, width: int, height: int) -> list[Strip]:
        self.seen = self.session.xray.version
        reqs = self.requests()
        if not reqs:
            return [Strip([Segment(f"run {self.run_id}: no request of a server carried a trace here", Style(dim=True))])]
        self.selected = min(self.selected, len(reqs) - 1)
        end_s = axis_end(reqs)
        bar_w = max(width - LABEL_W - 9, 10)
        right = f"{fmt.num(end_s, 2)} s"
        axis = " " * LABEL_W + "0 s" + " " * max(bar_w - 3 - len(right), 1) + right
        lines = [Strip([Segment(axis[:width], Style(dim=True))])]
        detail = [w for line in detail_lines(reqs[self.selected]) for w in textwrap.wrap(line, width, subsequent_indent="  ") or [""]]
        room = max(height - 3 - len(detail), 1)
        first = max(0, min(self.selected - room // 2, len(reqs) - room))
        for i in range(first, min(first + room, len(reqs))):
            r = reqs[i]
            sel = i == self.selected
            label = f"{'▶' if sel else ' '}{r.segment:>3} {r.trace_id[:8]} "
            segs = [Segment(label.ljust(LABEL_W)[:LABEL_W], Style(bold=sel))]
            for glyph, phase in bar_cells(r, bar_w, end_s):
                style = Style(bgcolor=PHASE_COLOURS[phase], color="#ffffff", bold=True) if phase else Style(color="#ffffff" if glyph != " " else None)
                segs.append(Segment(glyph, style))
            segs.append(Segment(f" {fmt.ms(r.client_e2e_s, 0, unit=False):>6}ms", Style(dim=not sel)))
            lines.append(Strip(segs).crop(0, width))
        lines.append(Strip([Segment(t, s) for t, s in legend()]).crop(0, width))
        lines += [Strip([Segment(text, Style(bold=k == 0))]) for k, text in enumerate(detail)]
        return lines[:height]
