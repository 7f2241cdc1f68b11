"""The leak view: the leak detector's evidence drawn on a braille canvas, no Textual (the memory
pane draws it on `L`). The baselines after each run as points on an axis zoomed to their own
range, the warm-up runs apart, the fitted line and the fan of its slope's 95 % interval through
the fit's centre (the interval the verdict reads) with the slope written over it, and a dotted
mark where a lever's preparation restarted the series."""

from __future__ import annotations

from monitors.leaks import LeakDetector, LeakVerdict, fit_fan
from tui_app.core.braille import Canvas, y_to_px

# Series indices: the legend's order and the chart's colours.
POINT, WARM, FIT, BAND, RESET = range(5)
LEGEND = ((POINT, "baseline after a run"), (WARM, "warm-up run"), (FIT, "fit"), (BAND, "95% of its slope"), (RESET, "lever prepared"))
MIN_SPAN_MB = 1.0  # the axis never zooms past this: flat noise of a few hundred kB stays flat


def draw(canvas: Canvas, leak: LeakDetector, verdict: LeakVerdict | None) -> tuple[float, float, list[tuple[str, int]]] | None:
    """The view on `canvas`: its axis's (lo, hi) in MiB and the legend of what it drew; None
    before the first baseline."""
    points = list(leak.history)
    if not points:
        return None
    fit = _fit_lines(leak, verdict)
    values = [mb for _, mb, _ in points] + [y for _, line in fit for _, y in line]
    lo, hi = min(values), max(values)
    pad = max((MIN_SPAN_MB - (hi - lo)) / 2, 0.0) + (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    x_lo, x_hi = points[0][0] - 0.5, points[-1][0] + 0.5

    def px(x: float) -> int:
        return round((x - x_lo) / (x_hi - x_lo) * (canvas.px_w - 1))

    for series, line in sorted(fit, key=lambda f: f[0] == FIT):  # the fit last: over its interval
        (x0, y0), (x1, y1) = line
        a, b = px(x0), px(x1)
        for x in range(a, b + 1):
            if series == BAND and x % 2:
                continue  # dotted: the interval, not a second line
            y = y0 + (y1 - y0) * ((x - a) / (b - a) if b > a else 0.0)
            canvas.dot(x, y_to_px(canvas, y, lo, hi), series)
    resets = [r for r in leak.resets if points[0][0] <= r < points[-1][0]]
    for r in resets:
        canvas.vline(px(r + 0.5), RESET)
    for x, mb, warm in points:  # last, over the lines: a point is 2×2 dots, a line one
        cx, cy = px(x), y_to_px(canvas, mb, lo, hi)
        for dx in (0, 1):
            for dy in (0, 1):
                canvas.dot(cx - dx, cy - dy if cy > 0 else cy + dy, WARM if warm else POINT)
    if fit and verdict is not None:  # the slope where the eye is, not only in a title a narrow pane cuts
        canvas.label(0, 0, f"{verdict.mb_per_run:+.2f} MB/run [{verdict.low:+.2f}, {verdict.high:+.2f}]", FIT)
    drawn = {POINT} | ({WARM} if any(w for _, _, w in points) else set()) | {series for series, _ in fit} | ({RESET} if resets else set())
    return lo, hi, [(name, k) for k, name in LEGEND if k in drawn]


def _fit_lines(leak: LeakDetector, verdict: LeakVerdict | None) -> list[tuple[int, tuple[tuple[float, float], tuple[float, float]]]]:
    """The fit and its slope's interval as lines from the first fitted run to the last, through the
    fitted baselines' centre, as the report draws them; none while the detector collects."""
    base = list(leak.baselines)
    if verdict is None or verdict.status == "collecting" or len(base) < 2:
        return []
    last = leak.history[-1][0]
    first = last - len(base) + 1
    return [(series, ((first, y0), (last, y1))) for series, (y0, y1) in zip((FIT, BAND, BAND), fit_fan(base, verdict), strict=True)]
