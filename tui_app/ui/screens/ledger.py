"""`g`: the lever ledger (core/ledger.py), each mix the session ran against plain on the same prompt
and length, and whether it paid on this machine; redrawn as runs finish."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from tui_app.core.ledger import HEADER, entries

KEYS = " g or escape: close · a mix is weighed against plain runs (every lever off but the cache) of the same prompt and length"
VERDICT_STYLES = {"pays": "green", "does": "bold red", "no": "yellow"}  # by the verdict's first word


class LedgerScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,g,q", "dismiss", "close")]
    DEFAULT_CSS = """
    LedgerScreen { background: $surface; }
    LedgerScreen > #ledger-body { height: 1fr; padding: 0 1; }
    LedgerScreen > #ledger-keys { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, session):
        super().__init__()
        self.session = session
        self.body = Static("", id="ledger-body")

    def compose(self) -> ComposeResult:
        yield self.body
        yield Static(KEYS, id="ledger-keys")

    def on_mount(self) -> None:
        self.show()

    def show(self) -> None:
        self.body.update(render(self.session))


def render(session) -> Table | Text:
    found = entries(session)
    if not found:
        return Text("no lever mix to weigh yet: run plain (every lever off but the cache) and a mix on the same prompt and length", style="dim")
    table = Table(title="The lever ledger: what each mix paid on this machine", title_style="bold", expand=True, box=None, header_style="bold")
    for i, name in enumerate(HEADER):
        table.add_column(name, justify="left" if i in (0, len(HEADER) - 1) else "right", overflow="fold", ratio=3 if i == len(HEADER) - 1 else None)
    for e in found:
        *cells, verdict = e.row()
        table.add_row(*cells, Text(verdict, style=VERDICT_STYLES.get(verdict.split()[0], "")))
    return table
