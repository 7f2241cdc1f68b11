"""What the KV pane says of a batch of distinct prompts (the engine's continuous batching): the
whole batch's pace beside its first sequence's, each sequence's progress, and the padded cache
against the rows' own tokens and what a paged cache's blocks would hold."""

from __future__ import annotations

from collections.abc import Iterable

from monitors.events import Step
from monitors.text import plural
from tui_app.core import fmt

BLOCK_TOKENS = 16  # a paged cache's block (vLLM's default): the comparison the padded cache is drawn against
BAR_CELLS = 8


def pace(steps: Iterable[Step]) -> tuple[float, float] | None:
    """(the batch's tokens a second, the first sequence's) over the decode steps given, or None."""
    decode = [s for s in steps if s.kind == "decode"]
    seconds = sum(s.dt_ns for s in decode) / 1e9
    if seconds <= 0:
        return None
    return sum(s.batch_tokens for s in decode) / seconds, sum(s.n_tokens for s in decode) / seconds


def cached_tokens(rows: list[list[int]]) -> int:
    """The rows' own tokens in the cache: each row's prompt and new tokens, all but its newest."""
    return sum(prompt + new - 1 for _, prompt, new, _ in rows)


def paged_tokens(rows: list[list[int]], block: int = BLOCK_TOKENS) -> int:
    """The slots a paged cache of `block`-token blocks would hold for the same rows."""
    return sum(-(-(prompt + new - 1) // block) * block for _, prompt, new, _ in rows)


def padding_text(step: Step) -> str:
    """The padded cache measured, its padding, and what a paged cache's blocks would hold instead."""
    per_slot = step.kv_alloc_bytes / max(1, len(step.batch) * step.seq_len)
    padding = 1 - step.kv_bytes / step.kv_alloc_bytes if step.kv_alloc_bytes else 0.0
    return f"{fmt.nbytes(step.kv_alloc_bytes)} held, {padding:.0%} padding; paged: {fmt.nbytes(round(paged_tokens(step.batch) * per_slot))}"


def head_text(steps: list[Step], size: int) -> str:
    """The batch's fill out of its size, its queue, its pace and its first sequence's."""
    last, rates = steps[-1], pace(steps)
    speed = f"  {rates[0]:.1f} tok/s, #0 {rates[1]:.1f}" if rates else ""
    return f"b{len(last.batch)}/{size} {last.waiting} waiting{speed}"


def summary(steps: list[Step], size: int) -> str:
    """A batched run's line for the headless output: what arrived and left, its pace and its cache."""
    last = steps[-1]
    arrived = max(number for number, *_ in last.batch) + last.waiting
    done = arrived - last.waiting - (len(last.batch) - 1)
    rates = pace(steps)
    decode = sum(s.kind == "decode" for s in steps)
    speed = f"; over its last {plural(decode, 'decode step')} {rates[0]:.1f} tok/s, the first sequence {rates[1]:.1f}" if rates else ""
    return f"batch of distinct prompts, {size} at a time: {arrived} arrived, {done} done, {last.waiting} waiting{speed}; KV {padding_text(last)}"


def bar(done: int, total: int, cells: int = BAR_CELLS) -> str:
    """A progress bar of `cells` cells (--ascii draws its blocks as ASCII, like every block)."""
    full = min(cells, round(cells * done / max(total, 1)))
    return "█" * full + "░" * (cells - full)


def row_texts(rows: list[list[int]]) -> list[str]:
    """One cell per sequence: its number, a bar of its new tokens against its length, the counts."""
    return [f"#{number} {bar(new, max_new)} {new}/{max_new}" for number, _, new, max_new in rows]


def packed(cells: list[str], width: int, gap: int = 2) -> list[str]:
    """Cells side by side in lines of `width`, as many to a line as fit (at least one)."""
    lines: list[str] = []
    for cell in cells:
        if lines and len(lines[-1]) + gap + len(cell) <= width:
            lines[-1] += " " * gap + cell
        else:
            lines.append(cell)
    return lines
