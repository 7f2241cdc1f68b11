"""The keys along the bottom line, written once.

Not Textual's Footer: it rebuilds its key widgets whenever the screen changes and keeps every old
one (its `compact` data binding holds them), about 0.8 MB per opening of the help screen or the
command palette here; the 30-minute soak's UI memory climbed 6 MB a minute with it.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widgets import Static

from tui_app.core import fmt


class KeyBar(Static):
    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    """

    # Which keys stay when the line is short (0: always); the rest are on `?`.
    PRIORITY: ClassVar[dict[str, int]] = {
        "help": 0,
        "quit": 0,
        "lever": 1,
        "next_view": 1,
        "rerun": 2,
        "new_prompt": 3,
        "preset": 3,
        "pause": 3,
        "auto": 4,
        "save": 4,  # export (screenshot: not on the bar)
        "xray": 4,
    }
    PRIORITY_LATER = 5  # screenshot, restart, the palette

    def on_mount(self) -> None:
        self.draw()

    def on_resize(self) -> None:
        self.draw()

    def draw(self) -> None:
        """Every key the app has (v, R and ctrl+s too), whole, the least important leaving first
        where the line is short; v and t only where they do something (one chart at a time;
        servers to move between)."""
        app = self.app
        key_style = f"bold {app.theme_variables.get('accent', 'yellow')}"
        shown = [b for b in app.BINDINGS if b.description and not b.priority and self.screen.key_applies(b.action)]
        # Help and quit first: they lead to everything else.
        shown.sort(key=lambda b: b.action not in ("help", "quit"))
        keys = [(app.get_key_display(b), b.description, self.PRIORITY.get(b.action.split("(")[0], self.PRIORITY_LATER)) for b in shown]
        if app.ENABLE_COMMAND_PALETTE:
            keys.append(("^p", "palette", self.PRIORITY_LATER + 1))
        kept = fmt.fit([((f"{key} {description}",), p) for key, description, p in keys], max(self.size.width - 1, 0))
        line = Text(" ")
        for (key, description, _), text in zip(keys, kept, strict=True):
            if text is not None:
                # The space goes with the key: SVG renderers drop a text run's leading space.
                line.append(f"{key} ", style=key_style)
                line.append(f"{description}  ")
        self.update(line)
