"""The runs table's columns: what each shows of a row, how wide it may grow, and which leave first
when the width is short. The TUI's table and the report's are both made from these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from monitors.phases import THINKING
from tui_app.core import fmt
from tui_app.core.session import Row


@dataclass(frozen=True)
class Column:
    title: str
    cell: Callable[[Row], str]
    priority: int  # 0 is always shown; higher numbers are left out first when space is short
    left: bool = False  # text is left-aligned, numbers right-aligned
    cap: int = 30  # widest a cell may make its column; longer text ends in "…"


def prompt_cell(r: Row) -> str:
    """The prompt's tokens and, where a server's prefix cache held some of them, how many: the
    server's newly computed count alone would read 0 for a prompt it had cached whole."""
    cached = (r.finished.server or {}).get("cached_tokens") if r.finished else None
    return f"{r.stats.prompt_tokens} ({cached} cached)" if cached else str(r.stats.prompt_tokens)


def server_figure(key: str, digits: int = 1) -> Callable[[Row], str]:
    """A figure of the server's own account of the run (its response's timings), in ms."""
    return lambda r: fmt.num((r.finished.server or {}).get(key), digits) if r.finished else ""


COLUMNS = (
    Column("run", lambda r: r.label, 0, left=True),
    Column("levers", lambda r: r.levers_label, 0, left=True, cap=40),
    Column("prompt", prompt_cell, 6),
    Column("new", lambda r: str(r.stats.n_tokens), 5),
    Column("TTFT ms", lambda r: fmt.ms(r.stats.ttft_s, 0, unit=False), 1),
    Column("TTFA ms", lambda r: fmt.ms(r.stats.ttfa_s, 0, unit=False), 2),
    Column("think", lambda r: f"{r.stats.phase_tokens.get(THINKING, 0)} ({fmt.pct(r.stats.thinking_share)})", 2),
    Column("ITL p50", lambda r: fmt.ms(r.stats.itl.p50, unit=False), 1),
    Column("p95", lambda r: fmt.ms(r.stats.itl.p95, unit=False), 3),
    Column("p99", lambda r: fmt.ms(r.stats.itl.p99, unit=False), 5),
    Column("tok/s", lambda r: fmt.num(r.stats.decode_tps), 0),
    Column("accept", lambda r: fmt.pct(r.stats.accept_rate), 3),
    # A server's KV cache is its own (the server pane shows its gauge); none is measured per run.
    Column("KV MiB", lambda r: "–" if r.stats.levers.server else fmt.mib(r.stats.kv_bytes), 4),
    Column("RSS MiB", lambda r: fmt.mib(r.finished.peak_rss) if r.finished else "", 4),
    Column("ppl", lambda r: fmt.num(r.finished.perplexity, 2) if r.finished else "", 5),
    Column("wall", lambda r: r.roofline.short() if r.roofline else "", 6, left=True),
    Column("GPU slowed", lambda r: f"{r.slowed_s:.1f} s" if r.slowed_s else "", 6),
    Column("J/token", lambda r: fmt.num(r.j_per_token, 3), 4),
    Column("tok/s/W", lambda r: fmt.num(1 / r.j_per_token, 2) if r.j_per_token else "", 6),
    Column("vs plain greedy", lambda r: r.note, 2, left=True),
)
# A server's runs: no perplexity, no plain greedy of our own to compare with, no KV cache measured
# per run (the server pane has its gauge); their width goes to the server's own account.
SERVER_COLUMNS = (
    *(c for c in COLUMNS if c.title not in ("KV MiB", "ppl", "vs plain greedy")),
    Column("server prefill ms", server_figure("prompt_ms"), 2),
    Column("server ms/tok", server_figure("predicted_per_token_ms", 2), 3),
    Column("end", lambda r: r.note, 2, left=True),
)
GAP = 2


def columns_for(rows: list[Row]) -> tuple[Column, ...]:
    """A server's runs' columns where any row is a server's, else the engine's; the roofline's wall
    only where a run was profiled (p, --profile-steps), the GPU's slowed time where a run had any,
    the energy a token (and tokens a second a watt, its inverse) where a GPU counts energy,
    the time to the first answer token and the thinking where a run had phases besides the answer."""
    phased = any(fmt.phased(r.stats) for r in rows)
    unused = {
        "wall": not any(r.roofline for r in rows),
        "GPU slowed": not any(r.slowed_s for r in rows),
        "J/token": not any(r.j_per_token for r in rows),
        "tok/s/W": not any(r.j_per_token for r in rows),
        "TTFA ms": not phased,
        "think": not phased,
    }
    chosen = SERVER_COLUMNS if any(r.stats.levers.server for r in rows) else COLUMNS
    return tuple(c for c in chosen if not unused.get(c.title))


def fit_columns(rows: list[tuple[str, ...]], width: int, columns: tuple[Column, ...] = COLUMNS) -> tuple[list[int], list[int]]:
    """The columns to show (indexes) and their widths: every column sized to its widest cell
    (capped); the least important left out until the rest fit in `width`."""
    widths = [min(max([len(c.title)] + [len(r[i]) for r in rows]), max(c.cap, len(c.title))) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    def total() -> int:
        return sum(widths[i] for i in shown) + GAP * (len(shown) - 1)

    while total() > width:
        droppable = [i for i in shown if columns[i].priority > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (columns[i].priority, i)))
    return shown, [widths[i] for i in shown]
