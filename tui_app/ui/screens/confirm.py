"""A yes/no question before an action that throws work away (restarting a healthy engine)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("enter", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 70%; max-width: 80; height: auto; border: thick $warning; background: $surface; padding: 1; }
    """

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            # Static, not Label: it wraps, where a Label's one line is cut at 80 columns.
            yield Static(self.question)
            yield Static("[b]y[/b] or enter: yes · [b]n[/b] or escape: no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
