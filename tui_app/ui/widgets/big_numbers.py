"""The presenter's figures (`--present`, P): the current run's decode tok/s, TTFT and ITL p50 in
Textual's Digits, three rows high, readable from the back of a room at 80×24. They are the status
line's figures (the same RunStats), so the two never disagree."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Digits

FIGURES = (("tok/s", "decode tok/s"), ("ttft", "TTFT ms"), ("itl", "ITL p50 ms"))


def figure(value: float | None) -> str:
    """A figure as Digits draws it: whole from 100, one decimal below, "-" before it is known."""
    if value is None or value != value:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def figures(session) -> dict[str, str]:
    rec = session.current
    if rec is None:
        return {key: "-" for key, _ in FIGURES}
    st = rec.total
    ms = [None if s is None else s * 1000 for s in (st.ttft_s, st.itl.p50)]
    return {"tok/s": figure(st.decode_tps), "ttft": figure(ms[0]), "itl": figure(ms[1])}


class BigNumbers(Horizontal):
    DEFAULT_CSS = """
    BigNumbers {
        height: 5;
        display: none;
    }
    BigNumbers > Vertical {
        width: 1fr;
        height: 5;
        border: round $primary;
        border-title-color: $text;
        border-title-style: bold;
        align-horizontal: center;
    }
    BigNumbers Digits {
        width: auto;
        color: $text;
        text-style: bold;
    }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.digits = {key: Digits("-", id=f"big-{key.replace('/', '')}") for key, _ in FIGURES}
        self.shown: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        for key, title in FIGURES:
            box = Vertical()
            box.border_title = title
            with box:
                yield self.digits[key]

    def show(self, session) -> None:
        """The session's current figures; a Digits redrawn only where its figure changed."""
        for key, text in figures(session).items():
            if self.shown.get(key) != text:
                self.shown[key] = text
                self.digits[key].update(text)
