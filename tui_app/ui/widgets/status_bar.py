"""One line: lever states, the current run's TTFT, ITL p50 and tok/s, and what the engine is doing.

Two line panes side by side: the run's figures, which move with every frame while generating,
on the right in a pane of their own, so that a frame sends them alone. Textual sends a changed
line from the left edge of its widget: in one pane, each frame re-sent the levers and the state
before them (docs/performance.md)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.strip import Strip

from tui_app.core import fmt
from tui_app.ui.widgets.pane import LinePane

LABELS = {
    "cache": lambda v: "cache" if v else "no-cache",
    "compile": lambda v: "compile" if v else "eager",
    "quant": lambda v: v if v != "off" else "fp",
    "batch": lambda v: str(v),
}


def short(lever: str, value) -> str:
    """A lever's value as the status line names it."""
    return LABELS.get(lever, str)(value)


SHRINK_AT = 12  # the figures' pane narrows only when they have shrunk by this many cells: a move sends the line


class _Part(LinePane):
    DEFAULT_CSS = """
    _Part {
        height: 1;
        width: 1fr;
    }
    """

    text = Text()

    def put(self, text: Text) -> None:
        if text != self.text:
            self.text = text
            self.dirty = True
        self.redraw()

    def draw(self, width: int, height: int) -> list[Strip]:
        return [Strip(self.text.render(self.app.console), self.text.cell_len).crop(0, width)]


class StatusBar(Horizontal):
    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.left, self.right = _Part(), _Part()
        self.right.styles.width = 0

    def compose(self) -> ComposeResult:
        yield self.left
        yield self.right

    def show(self, session, state: str, preset: str, auto: bool, wanted: dict | None = None, link: str | None = None) -> None:
        """Levers first, then what the engine is doing (so load/compile/quantize progress stays
        visible at 80 columns), then the current run's numbers; where the line is too long, whole
        items leave by priority (fmt.fit), the state shortening by whole words, never a cut word.
        wanted: levers switched by a key that the engine has not confirmed yet, shown at once as
        their new value with "…"; link: what the frame pacing says about a slow terminal."""
        lev = session.levers
        wanted = wanted or {}
        green, bold = "bold green", "bold"
        # (variants, priority, style of the text after the key; None: the whole item in that style)
        items: list[tuple[tuple[str, ...], int, str, str | None]] = []

        def lever(key: str, label: str, on: bool, priority: int = 0, name: str = "") -> None:
            if name == "concurrency" and "batch" in wanted:  # a server's streams per run
                label, on = f"c{wanted['batch']}…", True
            elif name in wanted:
                label, on = f"{short(name, wanted[name])}…", True
            items.append(((f"{key}:{label}",), priority, green if on else bold, key))

        server = session.active_server()
        if server:  # the server's own levers are its business; the client's are streams and prompts
            items.append(((server["engine"],), 1, "bold cyan", None))
            if len(session.servers) > 1:
                lever("t", server["label"], True, name="server")
            lever("b", f"c{lev.batch}", lev.batch != 1, name="concurrency")
        else:
            lever("k", "cache" if lev.cache else "no-cache", lev.cache, name="cache")
            lever("c", "compile" if lev.compile else "eager", lev.compile, name="compile")
            lever("w", lev.quant if lev.quant != "off" else "fp", lev.quant != "off", name="quant")
            lever("s", lev.spec, lev.spec != "off", name="spec")
            lever("b", str(lev.batch), lev.batch != 1, name="batch")
        lever("l", preset, preset != "short", priority=3)
        if auto:
            items.append((("auto",), 2, "bold magenta", None))
        items.append((tuple(f"│ {v}" for v in fmt.word_variants(state)), 1, "italic", None))
        if link:
            items.append(((link,), 0, "bold yellow", None))
        recorder = session.recorder
        if recorder is not None and recorder.stopped:  # the session goes on; what it no longer does stays in sight
            why = "disk full" if recorder.disk_full else "write failed"
            items.append(((f"rec stopped: {why}", "rec stopped"), 0, "bold red", None))
        figures = len(items)  # the run's figures from here on: the right-hand pane
        rec = session.current
        if rec is not None:
            st = rec.total
            items.append((("│",), 0, "italic", None))
            items.append(((f"TTFT {fmt.ms(st.ttft_s, 0)}",), 4, bold, None))
            items.append(((f"ITL p50 {fmt.ms(st.itl.p50)}", f"ITL {fmt.ms(st.itl.p50)}"), 2, bold, None))
            items.append(((f"{fmt.num(st.decode_tps)} tok/s",), 0, bold, None))  # the headline number: stays
        read = session.read_rate()
        if read is not None:
            rate, frac = read
            ceiling = session.bandwidth.read_bps / 1e9
            items.append(((f"mem bw {frac:.2f} ({rate / 1e9:.1f} of {ceiling:.1f} GB/s)", f"mem bw {frac:.2f}"), 4, bold, None))
        width = self.content_size.width or 10_000  # before the first layout: everything
        shown = fmt.fit([(v, p) for v, p, _, _ in items], width, sep=" ")
        left, right = Text(), Text()
        for k, ((_, _, style, key), text) in enumerate(zip(items, shown, strict=True)):
            t = left if k < figures else right
            if text is None:
                continue
            if t or t is right:
                t.append(" ")
            if key is not None:
                t.append(f"{key}:", style="dim")
                t.append(text[len(key) + 1 :], style=style)
            else:
                t.append(text, style=style)
        self._place(right.cell_len, width - left.cell_len)
        self.left.put(left)
        self.right.put(right)

    def _place(self, need: int, room: int) -> None:
        """The figures' pane: as wide as they are, widened at once, narrowed only after a clear
        shrink or when the rest needs the room (each move is a layout of the line)."""
        now = int(self.right.styles.width.value) if self.right.styles.width is not None else 0
        if need > now or need < now - SHRINK_AT or now > room:
            self.right.styles.width = need

    def render(self) -> Text:
        """The whole line as text (for tests and export)."""
        return Text.assemble(self.left.text, self.right.text)
