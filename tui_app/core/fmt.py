"""Number formatting shared by the TUI, the headless output and the benchmark tables."""

from __future__ import annotations

import math
from typing import TypeGuard

from monitors.phases import ANSWER, PHASES, THINKING, TOOL
from monitors.servers import FIGURE_LABELS


def _shown(x: float | None) -> TypeGuard[float]:
    """A number to show: not missing, not NaN (shown as –)."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def ms(seconds: float | None, digits: int = 1, unit: bool = True) -> str:
    return f"{seconds * 1000:.{digits}f}" + (" ms" if unit else "") if _shown(seconds) else "–"


def mib(n: float | None) -> str:
    return f"{n / 2**20:.1f}" if _shown(n) else "–"


def num(x: float | None, digits: int = 1, unit: str = "") -> str:
    return f"{x:.{digits}f}{unit}" if _shown(x) else "–"


def nbytes(n: float | None) -> str:
    if not _shown(n):
        return "–"
    value: float = n
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def where(ready) -> str:
    """The engine's device, or where --device-map placed the weights: "cuda:0 1.2 GiB + cpu 800.0 MiB"."""
    if not ready.placement:
        return f"{ready.device} ({ready.backend})" if ready.backend else ready.device
    return " + ".join(f"{device} {nbytes(n)}" for device, n in ready.placement.items())


def pct(x: float | None) -> str:
    return f"{x * 100:.0f}%" if _shown(x) else "–"


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


def strict_json(obj):
    """`obj` with every NaN and ±inf float as None: strict JSON parsers (browsers, jq, most
    languages) reject the bare NaN that Python's json writes by default."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def fit(items: list[tuple[tuple[str, ...], int]], width: int, sep: str = "  ") -> list[str | None]:
    """What a line of items shows in `width` cells: for each item (its variants, longest first, and
    a priority, 0 the most important), the variant shown, or None where it is left out. The least
    important item shown (the later one on a tie) steps to its next shorter variant, or leaves,
    until the line fits; then an item left out comes back, most important first, where it fits in
    the room a later step left. Every item shown is whole, never cut mid-word. Priority-0 items
    always stay."""
    chosen = [0] * len(items)
    shown = [True] * len(items)

    def length() -> int:
        texts = [items[i][0][chosen[i]] for i in range(len(items)) if shown[i]]
        return sum(len(t) for t in texts) + len(sep) * max(len(texts) - 1, 0)

    while length() > width:
        candidates = [i for i in range(len(items)) if shown[i] and (items[i][1] > 0 or chosen[i] + 1 < len(items[i][0]))]
        if not candidates:
            break
        i = max(candidates, key=lambda k: (items[k][1], k))
        if chosen[i] + 1 < len(items[i][0]):
            chosen[i] += 1
        else:
            shown[i] = False
    # An item left out on the way may fit in what a later one left: back, most important first.
    for k in sorted((j for j in range(len(items)) if not shown[j]), key=lambda j: (items[j][1], j)):
        shown[k], chosen[k] = True, 0
        while length() > width and chosen[k] + 1 < len(items[k][0]):
            chosen[k] += 1
        shown[k] = length() <= width
    return [items[i][0][chosen[i]] if shown[i] else None for i in range(len(items))]


def word_variants(text: str, keep: int = 2) -> tuple[str, ...]:
    """`text`, then shorter by whole words ending in "…", down to its first `keep` words."""
    words = text.split(" ")
    return (text, *(" ".join(words[:n]) + "…" for n in range(len(words) - 1, keep - 1, -1)))


def phased(stats) -> bool:
    """Whether a run's tokens were of more than the answer (a reasoning model's thinking, a tool call)."""
    return any(n for p, n in stats.phase_tokens.items() if p != ANSWER)


def phases(stats) -> str:
    """A phased run's split: each phase's tokens, the thinking share, and the time to the first answer token."""
    counts = ", ".join(f"{stats.phase_tokens.get(p, 0)} {p}" for p in PHASES if stats.phase_tokens.get(p) or p != TOOL)
    unclosed = ", never closed" if stats.last_phase == THINKING else ""
    return f"{counts} tok (thinking {pct(stats.thinking_share)}{unclosed})  TTFA {ms(stats.ttfa_s)}"
