"""How the app looks: ASCII or not, the dark or the light theme, the engineer's screen or the
presenter's (`--present`, P: big figures, thick charts, no table).

The panes name their colours as the terminal's sixteen (green, yellow, red, …); Textual draws those
in the colours of its ANSI theme for a dark or a light background. Both themes here are chosen so
that every text the app draws reads at WCAG AA (4.5:1 against what is behind it, 3:1 for chart
lines and borders): Textual's own light pair drew yellow at 1.9:1 on its grey, and its dark ANSI
red at 4.4:1 (tests/ui/test_look.py measures every cell of the screen in both).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.terminal_theme import TerminalTheme
from textual._ansi_theme import MONOKAI
from textual.theme import Theme

LIGHT = Theme(
    name="tokentop-light",
    primary="#004578",
    secondary="#0b5394",
    accent="#8f4700",
    warning="#8f4700",
    error="#b3261e",
    success="#1b6e2f",
    foreground="#1a1a1a",
    background="#f5f5f5",
    surface="#ececec",
    panel="#dedede",
    dark=False,
    variables={"footer-key-foreground": "#004578", "block-cursor-text-style": "bold reverse"},
)

# The sixteen colours on the light theme: white drawn as a dark grey (white text on a light
# background would vanish), the rest darkened until they read at 4.5:1 on the panel's grey.
LIGHT_ANSI = TerminalTheme(
    (245, 245, 245),
    (26, 26, 26),
    [(26, 26, 26), (179, 38, 30), (27, 110, 47), (128, 80, 0), (18, 74, 170), (128, 42, 140), (0, 98, 122), (72, 72, 72)],
    [(90, 90, 90), (160, 30, 40), (20, 100, 40), (112, 70, 0), (10, 70, 160), (120, 40, 130), (0, 90, 110), (10, 10, 10)],
)

# Textual's own dark ANSI colours, its red (normal and bright) lifted from 4.4:1 to 5.2:1 on the
# dark background, and its magenta, the same colour as its red there, made a magenta.
_MONOKAI = [tuple(MONOKAI.ansi_colors[i]) for i in range(16)]
_RED, _MAGENTA = (255, 59, 120), (215, 95, 215)
DARK_ANSI = TerminalTheme(
    tuple(MONOKAI.background_color),
    tuple(MONOKAI.foreground_color),
    [*_MONOKAI[:1], _RED, *_MONOKAI[2:5], _MAGENTA, *_MONOKAI[6:8]],
    [*_MONOKAI[8:9], _RED, *_MONOKAI[10:13], _MAGENTA, *_MONOKAI[14:]],
)


@dataclass(frozen=True)
class Look:
    ascii: bool = False  # --ascii: charts, borders and marks in plain ASCII (terminal.py)
    theme: str = "dark"  # --theme: dark or light
    present: bool = False  # --present: the presenter's screen to start with


def apply_theme(app, theme: str) -> None:
    """The app in `theme` (dark or light), with its sixteen colours to match."""
    app.ansi_theme_dark, app.ansi_theme_light = DARK_ANSI, LIGHT_ANSI
    if LIGHT.name not in app.available_themes:
        app.register_theme(LIGHT)
    app.theme = "textual-dark" if theme == "dark" else LIGHT.name
    # The palette's "Change theme" offers what is registered: the two themes checked to read at WCAG AA, no other.
    for name in set(app.available_themes) - {"textual-dark", LIGHT.name}:
        app.unregister_theme(name)


def look_of(opts) -> Look:
    """The look a command's options ask for (--ascii, --theme, --present)."""
    return Look(ascii=opts.ascii, theme=opts.theme, present=opts.present)
