"""KV cache: bytes against sequence length, measured from the cache object over the formula;
for a static cache, what is allocated against what is used. Both axes round numbers that hold
while the run grows into them (core/axes.py)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from monitors.events import Step
from tui_app.core import fmt
from tui_app.core.axes import Scale
from tui_app.core.batch_view import cached_tokens, head_text, packed, padding_text, row_texts
from tui_app.core.braille import plot
from tui_app.ui.status_text import cache_off
from tui_app.ui.widgets.chart import Chart


class KVChart(Chart):
    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        super().__init__(session, id=id, classes=classes)
        self.x_scale = Scale()

    def draw_chart(self, width: int, height: int) -> list | Text:
        s = self.session
        # The current run's points only: a run without the cache must not show the last one's bytes.
        run = s.current.started.run_id if s.current is not None else None
        pts = [p for p in s.kv if p.seq_len and p.run_id == run]
        self.border_title = "KV cache"
        r = s.ready
        if not s.levers.cache or not pts or r is None:
            msg = f"KV cache off: {cache_off(s)}" if not s.levers.cache else "waiting for tokens…"
            self.border_subtitle = ""
            return Text(msg, style="dim")
        # Only the points since the last time the sequence shrank (a rebuild after a lever switch).
        start = 0
        for i in range(1, len(pts)):
            if pts[i].seq_len < pts[i - 1].seq_len:
                start = i
        pts = pts[start:]
        batch = [st for st in s.batch_steps if st.run_id == run]
        extra = self.batch_lines(batch, s.levers.batch, height - 4) if batch else []
        canvas = self.canvas(width, height - 1 - len(extra))
        xs = [p.seq_len for p in pts]
        measured = [p.measured / 2**20 for p in pts]
        formula = [p.formula / 2**20 for p in pts]
        alloc = [p.alloc / 2**20 for p in pts]
        static = any(a > m for a, m in zip(alloc, measured, strict=True))
        series = [measured, formula] + ([alloc] if static else [])
        lo, hi = 0.0, self.scale.fit(max(v for ser in series for v in ser))
        plot(canvas, series, lo, hi, xs=[xs] * len(series), x_lo=0, x_hi=self.x_scale.fit(xs[-1]))
        last = pts[-1]
        same = "=" if last.measured == last.formula else "≠"
        # Distinct prompts: the rows' own tokens, summed; the rest of the allocation is their padding.
        tokens = f"Σ{cached_tokens(batch[-1].batch)} tokens" if batch else f"{s.levers.batch}×{last.seq_len}"
        held = "padded" if batch else "static"
        self.set_titles(
            [(("KV cache",), 0)],
            [
                ((f"{fmt.nbytes(last.measured)} measured {same} {fmt.nbytes(last.formula)} formula", f"{fmt.nbytes(last.measured)} {same} formula"), 0),
                ((f"(2×{r.kv_bytes_per_elem}B×{tokens}×{r.n_layers}×{r.kv_heads}×{r.head_dim})",), 2),
            ]
            + ([((f"{held}: {fmt.nbytes(last.alloc)} allocated", f"{fmt.nbytes(last.alloc)} alloc"), 1)] if static else []),
        )
        legend = [("measured", 0), ("formula", 1)] + ([(held, 2)] if static else [])
        return self.compose_text(canvas, lo, hi, lambda v: f"{v:.1f}MiB", legend) + extra

    def batch_lines(self, steps: list[Step], size: int, room: int) -> list[Strip]:
        """Under the chart, a batch of distinct prompts: its fill, queue and pace beside its first
        sequence's, each sequence's progress, and its padding against a paged cache's blocks."""
        width = self.content_size.width
        head, paged = head_text(steps, size), padding_text(steps[-1])
        lines = [head, *packed(row_texts(steps[-1].batch), width), paged]
        if len(lines) > room:  # a small pane: the fill and pace alone
            lines = [head][: max(room, 0)]
        bold, dim = Style(bold=True), Style(dim=True)
        return [Strip([Segment(text, bold if i == 0 else dim if text is paged else None)]).crop(0, width) for i, text in enumerate(lines)]
