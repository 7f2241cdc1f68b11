"""Per-token latency: ITL of each token, the prefill (TTFT) marked, lever switches as vertical marks,
mean and p95 as horizontal lines. Pages (core/axes.py): tokens keep their column, and when the
newest reaches the right edge the view moves half a width on."""

from __future__ import annotations

from itertools import takewhile

from rich.text import Text

from monitors.timing import mean, percentile
from tui_app.core import fmt
from tui_app.core.braille import plot, y_to_px
from tui_app.ui.widgets.chart import Chart


class LatencyChart(Chart):
    def draw_chart(self, width: int, height: int) -> list | Text:
        s = self.session
        canvas = self.canvas(width, height - 1)
        self.border_title = "per-token latency"
        if not s.latency:
            return Text("waiting for tokens…", style="dim")
        first = self.pager.first(s.latency[0].index, s.latency[-1].index, canvas.px_w)
        window = list(takewhile(lambda p: p.index >= first, reversed(s.latency)))[::-1]
        decode = [p for p in window if p.kind in ("decode", "verify")]
        itl_ms = [p.seconds * 1000 for p in decode]
        # Scale to the decode ITLs: a prefill is often 10× longer and would flatten them; it is marked instead.
        hi = self.scale.fit(max(itl_ms, default=1.0) * 1.1)
        lo = 0.0
        series = [[None] * canvas.px_w, [None] * canvas.px_w]
        for p in window:
            x = p.index - first
            if 0 <= x < canvas.px_w and p.kind in ("decode", "verify"):
                series[0 if p.kind == "decode" else 1][x] = min(p.seconds * 1000, hi)
        if itl_ms:  # reference lines first, so the data is drawn over them
            canvas.hline(y_to_px(canvas, mean(itl_ms), lo, hi), 2)
            canvas.hline(y_to_px(canvas, percentile(itl_ms, 95), lo, hi), 3)
        plot(canvas, series, lo, hi, x_hi=canvas.px_w - 1)
        for p in window:
            if p.kind in ("prefill", "reprefill"):
                x = p.index - first
                canvas.vline(x, 4)
                canvas.label(min(x // 2 + 1, canvas.width - 1), 0, f"{'TTFT' if p.kind == 'prefill' else 're-prefill'} {p.seconds * 1000:.0f}ms", 4)
        for m in s.markers:
            x = m.index - first
            if 0 <= x < canvas.px_w and not m.label.startswith("run"):
                canvas.vline(x, 5)
                canvas.label(min(x // 2 + 1, canvas.width - 1), 1, m.label, 5)
        rec = s.current
        if rec is not None:
            st = rec.total
            self.set_titles(
                [(("per-token latency", "latency"), 0)],
                [
                    ((f"run {rec.started.run_id}",), 3),
                    ((f"TTFT {fmt.ms(st.ttft_s, 0)}",), 2),
                    ((f"ITL p50 {fmt.ms(st.itl.p50)}", f"p50 {fmt.ms(st.itl.p50)}"), 0),
                    ((f"p95 {fmt.ms(st.itl.p95)}",), 1),
                ],
            )
        return self.compose_text(
            canvas, lo, hi, lambda v: f"{v:.0f}ms", [("decode", 0), ("spec verify", 1), ("mean", 2), ("p95", 3), ("prefill", 4), ("lever", 5)]
        )
