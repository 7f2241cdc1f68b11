"""Which cells of a pane changed between two frames, as the regions to repaint.

Textual repaints a refreshed widget whole: every line of it, every cell, each styled run with its
full colour codes. A chart that gained one column, or a status line whose tok/s moved, was sent to
the terminal entire at every frame (79 KB/s at 160×45, docs/performance.md). Refreshing only the
regions returned here (`Widget.refresh(*regions)`) makes the compositor send the changed lines
alone, each from the styled segment holding its first changed cell to the one holding its last
(Textual crops an update to whole segments, not to cells: the upstream change proposed in
docs/performance.md would send the changed cells).
"""

from __future__ import annotations

from rich.cells import cell_len, get_character_cell_size
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

Cell = tuple[str, Style | None]


def cells(strip: Strip) -> list[Cell]:
    """One entry per terminal cell: a wide character's second cell is ("", its style), a combining
    mark joins the cell before it."""
    out: list[Cell] = []
    for text, style, _ in strip:
        if len(text) == cell_len(text):
            out.extend((ch, style) for ch in text)
            continue
        for ch in text:
            size = get_character_cell_size(ch)
            if size == 0 and out:
                out[-1] = (out[-1][0] + ch, out[-1][1])
            elif size:
                out.append((ch, style))
                if size == 2:
                    out.append(("", style))
    return out


def changed_span(old: Strip, new: Strip) -> tuple[int, int] | None:
    """The [x1, x2) of cells from the first to the last that differ between two lines of the same
    width. One span a line: what lies between two changes on a line is sent again."""
    if old == new:
        return None
    a, b = cells(old), cells(new)
    n = min(len(a), len(b))
    first = next((x for x in range(n) if a[x] != b[x]), None)
    if first is None:
        return None
    last = next(x for x in range(n - 1, first - 1, -1) if a[x] != b[x])
    return first, last + 1


def damage(old: list[Strip], new: list[Strip]) -> list[Region]:
    """Regions of the content area (one line each) where `new` differs from `old`: two frames of
    the same pane, each line padded to its width."""
    regions = []
    for y, (o, n) in enumerate(zip(old, new, strict=True)):
        span = changed_span(o, n)
        if span is not None:
            regions.append(Region(span[0], y, span[1] - span[0], 1))
    return regions
