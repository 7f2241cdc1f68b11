"""The text as it is generated: the prompt dimmed, lever switches marked inline, and the tokens
coloured (`o`) by what made them: plain, by origin under speculative decoding (the accepted drafts
underlined, the target's own plain, the last step's rejected drafts ghosted at the tail until the
next text comes, and the run's counts of both in the legend), by latency (each step's time a token against the run's
median so far), by confidence (the model's probability of the token it picked, measured by the
engine once this colouring is chosen), or by phase (a reasoning model's thinking, its answer and
its tool calls). Thinking is drawn in italics in every colouring, and `f` folds each think span to
one line that counts on while the model thinks (`thinking… 812 tokens, 41 s`). Every chunk keeps
its origin, heat, confidence and phase, so switching re-styles what is kept.

Drawn through the line API from wrapped lines that are kept between frames: a finished paragraph
is wrapped once, and a frame re-wraps only the paragraph still growing. Re-wrapping the visible
tail every frame cost more than all four charts together (measured by benchmarks/terminal/ui_cost.py).

The text pages rather than scrolls: lines keep their row, and when the pane is full the view
moves half a pane on. Scrolling by one line moved every line on screen, so each new line sent the
whole pane to the terminal again.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from rich.text import Text
from textual.strip import Strip

from monitors.events import cycled
from tui_app.ui.widgets.pane import LinePane

MAX_CHUNKS = 4000  # what a resize re-wraps from
MAX_LINES = 1000  # wrapped lines kept; far more than any terminal shows
FREEZE_CHARS = 2000  # a paragraph longer than this has all but its last line frozen
COLOURINGS = ("plain", "origin", "latency", "confidence", "phase")
THINKING_STYLE = "italic"  # in every colouring: readable without colour and in --ascii
PHASE_STYLES = {"thinking": "italic cyan", "tool call": "bold magenta", "answer": ""}
FOLDED = "fold"  # a chunk's phase: a folded think span's line, shown only while folding
DRAFTED = "underline green"  # underlined: readable in 16 colours, without colour and in --ascii
REJECTED = "dim strike"  # dim: readable where a terminal draws no strike
# Heat a token: its step's time a token over the run's median so far, up to HEAT_BOUNDS[i]; bold
# and reverse say it without colour.
HEAT_BOUNDS = (1.25, 2.0, 4.0)
HEAT_STYLES = ("green", "yellow", "bold red", "bold reverse red")
# Confidence in the same four styles: a token whose probability is at least SURE_BOUNDS[i].
SURE_BOUNDS = (0.9, 0.5, 0.2)


def _markup(style: str) -> str:
    """A pane style as a border title's markup: there a bare "green" is CSS's (#008000, 3.6:1 on
    the dark background), so the terminal colour is named as Textual names it, drawn in the theme's."""
    return " ".join(f"ansi_{word}" if word in ANSI else word for word in style.split())


ANSI = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")
LEGENDS = {
    "plain": "",
    "origin": f"o: origin · [{_markup(DRAFTED)}]accepted draft[/] · the target's own · [{REJECTED}]rejected[/]",
    "latency": "o: latency vs the run's median · "
    + " ".join(f"[{_markup(st)}]{label}[/]" for st, label in zip(HEAT_STYLES, ("≤1.25×", "≤2×", "≤4×", "slower"), strict=True)),
    "confidence": "o: the model's probability of each token · "
    + " ".join(f"[{_markup(st)}]{label}[/]" for st, label in zip(HEAT_STYLES, ("≥90%", "≥50%", "≥20%", "<20%"), strict=True))
    + " · unmeasured plain",
    "phase": "o: phase · " + " ".join(f"[{_markup(st)}]{p}[/]" for p, st in PHASE_STYLES.items() if st) + " · the answer plain",
}


def heat(ratio: float) -> int:
    return next((i for i, bound in enumerate(HEAT_BOUNDS) if ratio <= bound), len(HEAT_BOUNDS))


def sureness(p: float) -> int:
    """The style index of a token the model gave probability `p`."""
    return next((i for i, bound in enumerate(SURE_BOUNDS) if p >= bound), len(SURE_BOUNDS))


class TokenStream(LinePane):
    DEFAULT_CSS = """
    TokenStream {
        border: round $primary;
        border-title-color: $text;
        border-subtitle-color: $text;
        height: 1fr;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        # (text, its own style, origin "drafted" or "", heat or -1, sureness or -1, phase): the last four styled by the colouring
        self.chunks: deque[tuple[str, str, str, int, int, str]] = deque(maxlen=MAX_CHUNKS)
        self.colouring = "plain"
        self.border_title = "tokens"
        self._done: deque[Strip] = deque(maxlen=MAX_LINES)  # lines of finished paragraphs
        self._done_total = 0  # lines ever put in _done: the number of the line after its last
        self._para = Text()  # the paragraph still growing
        self._width = 0
        self.ghost = ""  # the last step's rejected drafts, drawn after the text in the origin colouring
        self.drafts = [0, 0]  # the run's accepted and rejected drafts
        self.folded = False  # f: each think span as one line
        self.thinking_note = ""  # the span still growing, in words: its folded line, drawn after the text until it ends

    def add_prompt(self, run_id: int, text: str, levers: str) -> None:
        self.drafts = [0, 0]
        self._legend()
        if self.chunks:
            self._add("\n\n", "")
        self._add(f" run {run_id} · {levers} ", "reverse")
        self._add("\n" + text.strip() + "\n", "dim")

    def add_text(self, text: str, origin: str = "", heat: int = -1, sure: int = -1, phase: str = "answer") -> None:
        if text:
            self._add(text, "", origin, heat, sure, phase)

    def end_thinking(self, note: str) -> None:
        """A think span ended: its folded line, in its place (shown while folding)."""
        self.thinking_note = ""
        self._add(f"⟨{note}⟩\n", "dim", phase=FOLDED)

    def fold(self) -> bool:
        self.folded = not self.folded
        if self._width:
            self._rewrap()
        self.dirty = True
        return self.folded

    def add_mark(self, label: str, error: bool = False) -> None:
        self._add(f"⟨{label}⟩", "bold red" if error else "bold reverse yellow")  # reverse: the pane's own background on yellow, in either theme

    def count_drafts(self, accepted: int, rejected: int, ghost: str) -> None:
        """A verify step's drafts: counted for the run, its rejected ones' text the ghost after the text."""
        self.drafts[0] += accepted
        self.drafts[1] += rejected
        self.ghost = ghost
        self._legend()

    def _legend(self) -> None:
        legend = LEGENDS[self.colouring]
        if self.colouring == "origin" and any(self.drafts):
            legend = legend.replace("accepted draft[/]", f"accepted draft[/] {self.drafts[0]}") + f" {self.drafts[1]}"
        self.border_subtitle = legend

    def next_colouring(self) -> str:
        self.colouring = cycled(COLOURINGS, self.colouring)
        self._legend()
        if self._width:
            self._rewrap()
        self.dirty = True
        return self.colouring

    def _style(self, style: str, origin: str, heat: int, sure: int, phase: str) -> str:
        if style:
            return style
        if self.colouring == "phase":
            return PHASE_STYLES.get(phase, "")
        if self.colouring == "origin":
            own = DRAFTED if origin == "drafted" else ""
        elif self.colouring in ("latency", "confidence"):
            level = heat if self.colouring == "latency" else sure
            own = HEAT_STYLES[level] if level >= 0 else ""
        else:
            own = ""
        return f"{own} {THINKING_STYLE}".strip() if phase == "thinking" else own

    def _shown(self, phase: str) -> bool:
        return phase != ("thinking" if self.folded else FOLDED)

    def _add(self, text: str, style: str, origin: str = "", heat: int = -1, sure: int = -1, phase: str = "answer") -> None:
        self.ghost = ""
        self.chunks.append((text, style, origin, heat, sure, phase))
        if self._shown(phase):
            self._feed(text, self._style(style, origin, heat, sure, phase))
        self.dirty = True

    def _feed(self, text: str, style: str) -> None:
        *finished, rest = text.split("\n")
        for part in finished:
            self._para.append(part, style or None)
            self._finish(self._lines(self._para))
            self._para = Text()
        self._para.append(rest, style or None)

    def _lines(self, text: Text) -> list[Text]:
        """`text` wrapped at the pane's width; an empty paragraph is one empty line."""
        if self._width <= 0:
            return []
        return list(text.wrap(self.app.console, self._width)) if text else [Text()]

    def _strip(self, line: Text) -> Strip:
        if not line:  # Text("") renders one empty segment; an empty line has none
            return Strip([])
        return Strip(list(line.render(self.app.console)), line.cell_len)

    def _finish(self, lines: list[Text]) -> None:
        self._done.extend(map(self._strip, lines))
        self._done_total += len(lines)

    def _rewrap(self) -> None:
        """A new width: wrap the kept chunks again."""
        self._done.clear()
        self._done_total = 0
        self._para = Text()
        for text, style, *marks in self.chunks:
            if self._shown(marks[-1]):
                self._feed(text, self._style(style, *marks))

    def draw(self, width: int, height: int) -> list[Strip]:
        if width != self._width:
            self._width = width
            self._rewrap()
        lines = self._lines(self._para)
        if self.ghost and self.colouring == "origin":  # drawn, never kept: the next text takes its place
            lines = self._lines(self._para + Text(self.ghost.replace("\n", " "), REJECTED))
        elif self.folded and self.thinking_note:  # drawn, never kept: it counts on until the span ends
            lines = self._lines(self._para + Text(f"⟨{self.thinking_note}⟩", "dim"))
        elif len(self._para) > FREEZE_CHARS and len(lines) > 1:
            # A paragraph with no newline in sight: stop re-wrapping the lines it has filled.
            self._finish(lines[:-1])
            self._para = lines[-1]
            lines = lines[-1:]
        tail = [self._strip(line) for line in lines]
        total = self._done_total + len(tail)
        kept = self._done_total - len(self._done)  # the number of _done's first line
        top = max(kept, page_top(total, height))
        shown = list(islice(self._done, top - kept, None)) + tail
        return shown[max(0, top - self._done_total) :][:height]


def page_top(total: int, height: int) -> int:
    """The first line shown of `total` in a pane `height` lines high: pages that move on by
    height + 1 - height // 2 lines, so that a page's first line (the one the newest fills when added
    a line at a time) sits in the upper half. A function of the count alone, not of which frames
    were drawn: the same text shows the same way whatever the frame rate."""
    step = height + 1 - max(height // 2, 1)
    return 0 if total <= height else -(-(total - height) // step) * step
