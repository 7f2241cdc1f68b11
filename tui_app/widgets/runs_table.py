"""One row per run and per lever segment: the side-by-side comparison the levers exist for."""

from __future__ import annotations

from textual.widgets import DataTable

from tui_app import fmt

COLUMNS = ("run", "levers", "prompt", "new", "TTFT", "ITL p50", "p95", "p99", "tok/s", "accept", "KV", "peak RSS", "ppl", "output")


def row_cells(row) -> tuple[str, ...]:
    s, f = row.stats, row.finished
    itl = s.itl
    return (
        row.label, s.levers.label(), str(s.prompt_tokens), str(s.n_tokens), fmt.ms(s.ttft_s, 0),
        fmt.ms(itl.p50), fmt.ms(itl.p95), fmt.ms(itl.p99), fmt.num(s.decode_tps), fmt.pct(s.accept_rate),
        fmt.nbytes(s.kv_bytes), fmt.nbytes(f.peak_rss) if f else "", fmt.num(f.perplexity, 2) if f else "",
        row.note,
    )


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable {
        height: 10;
        border: round $primary-darken-2;
    }
    """

    def __init__(self, session, *, id: str | None = None, classes: str | None = None):
        # No cursor and no focus: nothing selects rows, and a focus that lands at a
        # timing-dependent moment made the screen differ between identical sessions.
        super().__init__(id=id, classes=classes, cursor_type="none", zebra_stripes=True)
        self.can_focus = False
        self.session = session
        self.dirty = True
        self.border_title = "runs"
        self._shown: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def redraw(self) -> None:
        if not self.dirty or not self.display:
            return
        self.dirty = False
        rows = self.session.rows()
        keys = [r.label for r in rows]
        if set(self._shown) - set(keys):  # rows trimmed away: rebuild once
            self.clear()
            self._shown.clear()
        for row, key in zip(rows, keys):
            cells = row_cells(row)
            old = self._shown.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            else:
                # Only changed cells: each update invalidates DataTable's render caches,
                # and rewriting every cell every second grew the UI's memory by MBs a minute.
                for col, value, before in zip(self.columns, cells, old):
                    if value != before:
                        self.update_cell(key, col, value)
            self._shown[key] = cells
        if rows:  # follow the newest run; only vertically (moving the cursor also scrolled sideways)
            self.scroll_end(animate=False, immediate=True)
