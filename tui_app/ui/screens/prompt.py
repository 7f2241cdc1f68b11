"""`n`: type a new prompt."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical { width: 80%; height: auto; border: thick $primary; background: $surface; padding: 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("New prompt (enter to run, escape to cancel):")
            yield Input(placeholder="Explain the KV cache in two sentences.", id="prompt")
            yield Label("", id="prompt-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.query_one("#prompt-error", Label).update("[red]the prompt is empty[/]")
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
