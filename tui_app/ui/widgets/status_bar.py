"""One line: lever states, the current run's TTFT, ITL p50 and tok/s, and what the engine is doing."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui_app.core import fmt
from tui_app.ui.status_text import status_items


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """

    _shown: Text | None = None

    def show(self, session, state: str, preset: str, auto: bool) -> None:
        """The line status_text.status_items says; where it is too long, whole items leave by
        priority (fmt.fit), the state shortening by whole words, never a cut word."""
        items = status_items(session, state, preset, auto)
        width = self.content_size.width or 10_000  # before the first layout: everything
        shown = fmt.fit([(item.variants, item.priority) for item in items], width, sep=" ")
        t = Text()
        for item, text in zip(items, shown, strict=True):
            if text is None:
                continue
            if t:
                t.append(" ")
            if item.key is not None:
                t.append(f"{item.key}:", style="dim")
                t.append(text[len(item.key) + 1 :], style=item.style)
            else:
                t.append(text, style=item.style)
        if t != self._shown:
            # Height is fixed at one line, so no layout pass: a layout refresh repaints the whole screen.
            self._shown = t
            self.update(t, layout=False)
