"""What a terminal can show: plain ASCII (--ascii) and 16 colours, as line filters over everything
the app draws (our panes and Textual's own widgets alike: borders, toasts, the help screen).

A filter changes characters one for one, never a cell's width, so every layout stays as it is.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from rich.color import Color as RichColor
from rich.color import ColorSystem
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter

BRAILLE = 0x2800
# Braille dot bits by row of the cell, top to bottom (each row: the left and the right dot).
_ROWS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
# A cell's dots by the rows they are in: a line chart drawn in these reads as one.
_BY_ROWS = {(): " ", (0,): "'", (1,): "-", (2,): "-", (3,): "_", (0, 1): "'", (1, 2): "-", (2, 3): "."}
SYMBOLS = {
    "■": "#",
    "…": ".",
    "→": ">",
    "←": "<",
    "↑": "^",
    "↓": "v",
    "⟨": "<",
    "⟩": ">",
    "·": "-",
    "•": "*",
    "–": "-",
    "—": "-",
    "≠": "!",
    "≈": "~",
    "×": "x",
    "▶": ">",
    "◀": "<",
    "▲": "^",
    "▼": "v",
    "✓": "v",
    "✔": "v",
    "✗": "x",
    "✘": "x",
}


def braille_ascii(ch: str) -> str:
    """A braille cell of a chart as one ASCII character: where its dots are, top to bottom."""
    bits = ord(ch) - BRAILLE
    rows = tuple(r for r, (left, right) in enumerate(_ROWS) if bits & (left | right))
    if len(rows) >= 3:
        return "|"
    return _BY_ROWS.get(rows, ":")


def box_ascii(ch: str) -> str:
    """A box-drawing or block character as -, |, + or #."""
    name = unicodedata.name(ch, "")
    if "BLOCK" in name or "SHADE" in name or name.startswith(("UPPER ", "LOWER ", "LEFT ", "RIGHT ", "QUADRANT")):
        return "#" if "SHADE" not in name else ":"
    horizontal, vertical = "HORIZONTAL" in name, "VERTICAL" in name
    if horizontal and not vertical:
        return "-"
    if vertical and not horizontal:
        return "|"
    if name.endswith(("LEFT", "RIGHT")) and "AND" not in name and "ARC" not in name:  # half lines: ╴ ╶
        return "-"
    if name.endswith(("UP", "DOWN")) and "AND" not in name and "ARC" not in name:  # ╵ ╷
        return "|"
    return "+"


def _ascii_table() -> dict[int, str]:
    table = {BRAILLE + bits: braille_ascii(chr(BRAILLE + bits)) for bits in range(256)}
    table.update({code: box_ascii(chr(code)) for code in range(0x2500, 0x25A0)})
    table.update({ord(k): v for k, v in SYMBOLS.items()})
    return table


ASCII_TABLE = _ascii_table()


class AsciiFilter(LineFilter):
    """Braille, box drawing, blocks and the app's marks as plain ASCII (--ascii)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [Segment(text.translate(ASCII_TABLE) if not text.isascii() else text, style, control) for text, style, control in segments]


@lru_cache(1024)
def _standard(color: RichColor | None) -> RichColor | None:
    if color is None or color.is_default or color.is_system_defined:
        return color
    return color.downgrade(ColorSystem.STANDARD)


DARK = (0, 8)  # black and bright black (grey): where the app's dark surfaces land among the 16


@lru_cache(1024)
def sixteen(style: Style) -> Style:
    """A style in the 16 colours of the terminal's palette. The app's dark surfaces (the screen,
    the panes, the status and key bars) are the terminal's own background: the nearest of the 16
    to them is black or grey, on which the dimmed text (grey) would not show."""
    bg = _standard(style.bgcolor)
    if bg is not None and bg.number in DARK:
        bg = RichColor.default()
    fg = _standard(style.color)
    if fg is not None and bg is not None and fg == bg:  # text the colour of its background: the terminal's own text colour
        fg = RichColor.default()
    return style + Style.from_color(fg, bg)


class SixteenColors(LineFilter):
    """Every colour as one of the 16 a basic terminal has: what it shows, also in screenshots
    (Textual lowers colours only as it writes to the terminal; an SVG export would show them all)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [Segment(text, None if style is None else sixteen(style), control) for text, style, control in segments]
