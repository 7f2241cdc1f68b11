"""One line: lever states, the current run's TTFT, ITL p50 and tok/s, and what the engine is doing."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui_app import fmt


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
        visible at 80 columns), then the current run's numbers."""
        lev = session.levers
        t = Text()

        def lever(key: str, label: str, on: bool) -> None:
            t.append(f"{key}:", style="dim")
            t.append(label, style="bold green" if on else "bold")
            t.append(" ")

        server = session.active_server()
        if server:  # the server's own levers are its business; the client's are streams and prompts
            t.append(f"{server['engine']} ", style="bold cyan")
            if len(session.servers) > 1:
                lever("t", server["label"], True)
            lever("b", f"c{lev.batch}", lev.batch != 1)
        else:
            lever("k", "cache" if lev.cache else "no-cache", lev.cache)
            lever("c", "compile" if lev.compile else "eager", lev.compile)
            lever("w", lev.quant if lev.quant != "off" else "fp", lev.quant != "off")
            lever("s", lev.spec, lev.spec != "off")
            lever("b", str(lev.batch), lev.batch != 1)
        lever("l", preset, preset != "short")
        if auto:
            t.append("auto ", style="bold magenta")
        t.append(f"│ {state} ", style="italic")
        rec = session.current
        if rec is not None:
            st = rec.total
            t.append(f"│ TTFT {fmt.ms(st.ttft_s, 0)}  ITL p50 {fmt.ms(st.itl.p50)}  {fmt.num(st.decode_tps)} tok/s", style="bold")
        if t != self._shown:
            # Height is fixed at one line, so no layout pass: a layout refresh repaints the whole screen.
            self._shown = t
            self.update(t, layout=False)
