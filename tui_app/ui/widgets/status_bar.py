"""One line: lever states, the current run's TTFT, ITL p50 and tok/s, and what the engine is doing."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui_app.core import fmt


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
        """Levers first, then what the engine is doing (so load/compile/quantize progress stays
        visible at 80 columns), then the current run's numbers; where the line is too long, whole
        items leave by priority (fmt.fit), the state shortening by whole words, never a cut word."""
        lev = session.levers
        green, bold = "bold green", "bold"
        # (variants, priority, style of the text after the key; None: the whole item in that style)
        items: list[tuple[tuple[str, ...], int, str, str | None]] = []

        def lever(key: str, label: str, on: bool, priority: int = 0) -> None:
            items.append(((f"{key}:{label}",), priority, green if on else bold, key))

        server = session.active_server()
        if server:  # the server's own levers are its business; the client's are streams and prompts
            items.append(((server["engine"],), 1, "bold cyan", None))
            if len(session.servers) > 1:
                lever("t", server["label"], True)
            lever("b", f"c{lev.batch}", lev.batch != 1)
        else:
            lever("k", "cache" if lev.cache else "no-cache", lev.cache)
            lever("c", "compile" if lev.compile else "eager", lev.compile)
            lever("w", lev.quant if lev.quant != "off" else "fp", lev.quant != "off")
            lever("s", lev.spec, lev.spec != "off")
            lever("b", str(lev.batch), lev.batch != 1)
        lever("l", preset, preset != "short", priority=3)
        if auto:
            items.append((("auto",), 2, "bold magenta", None))
        items.append((tuple(f"│ {v}" for v in fmt.word_variants(state)), 1, "italic", None))
        recorder = session.recorder
        if recorder is not None and recorder.stopped:  # the session goes on; what it no longer does stays in sight
            why = "disk full" if recorder.disk_full else "write failed"
            items.append(((f"rec stopped: {why}", "rec stopped"), 0, "bold red", None))
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
        t = Text()
        for (_, _, style, key), text in zip(items, shown, strict=True):
            if text is None:
                continue
            if t:
                t.append(" ")
            if key is not None:
                t.append(f"{key}:", style="dim")
                t.append(text[len(key) + 1 :], style=style)
            else:
                t.append(text, style=style)
        if t != self._shown:
            # Height is fixed at one line, so no layout pass: a layout refresh repaints the whole screen.
            self._shown = t
            self.update(t, layout=False)
