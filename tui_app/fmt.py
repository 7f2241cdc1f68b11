"""Number formatting shared by the TUI, the headless output and the benchmark tables."""

from __future__ import annotations

import math

from monitors.servers import FIGURE_LABELS


def _bad(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def ms(seconds: float | None, digits: int = 1, unit: bool = True) -> str:
    return "–" if _bad(seconds) else f"{seconds * 1000:.{digits}f}" + (" ms" if unit else "")


def mib(n: float | None) -> str:
    return "–" if _bad(n) else f"{n / 2**20:.1f}"


def num(x: float | None, digits: int = 1, unit: str = "") -> str:
    return "–" if _bad(x) else f"{x:.{digits}f}{unit}"


def nbytes(n: float | None) -> str:
    if _bad(n):
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def pct(x: float | None) -> str:
    return "–" if _bad(x) else f"{x * 100:.0f}%"


def figure_text(name: str, value) -> str:
    """A server's figure (monitors.servers) as the server pane and `attach --no-tui` show it."""
    if isinstance(value, dict):  # quantiles over the window
        return f"{FIGURE_LABELS.get(name, name)} p50 {ms(value.get('p50'))} p95 {ms(value.get('p95'))} (n {value.get('n', 0):.0f})"
    if name in ("kv_usage", "prefix_hit", "spec_accept"):
        return f"{FIGURE_LABELS.get(name, name)} {pct(value)}"
    if name == "rss":
        return f"{FIGURE_LABELS[name]} {nbytes(value)}"
    digits = 0 if name in ("running", "waiting") else 1
    return f"{FIGURE_LABELS.get(name, name)} {num(value, digits)}"
