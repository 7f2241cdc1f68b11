"""Counted nouns, for every line that says how many: "1 run", "2 runs"."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"
