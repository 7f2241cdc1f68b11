"""The keys along the bottom line, written once.

Not Textual's Footer: it rebuilds its key widgets whenever the screen changes and keeps every old
one (its `compact` data binding holds them), about 0.8 MB per opening of the help screen or the
command palette here; the 30-minute soak's UI memory climbed 6 MB a minute with it.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class KeyBar(Static):
    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    """

    def on_mount(self) -> None:
        app = self.app
        key_style = f"bold {app.theme_variables.get('accent', 'yellow')}"
        shown = [b for b in app.BINDINGS if b.show]
        # Help and quit first: on a narrow terminal the end of the line is cut off.
        shown.sort(key=lambda b: b.action not in ("help", "quit"))
        keys = [(app.get_key_display(b), b.description) for b in shown]
        if app.ENABLE_COMMAND_PALETTE:
            keys.append(("^p", "palette"))
        line = Text(" ")
        for key, description in keys:
            # The space goes with the key: SVG renderers drop a text run's leading space.
            line.append(f"{key} ", style=key_style)
            line.append(f"{description}  ")
        self.update(line)
