"""Text for people: counted nouns ("1 run", "2 runs"), and a growing token list detokenized as it grows
(with any tokenizer that has `decode`: transformers', or the `tokenizers` library's own)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


class IncrementalDecoder:
    """Detokenizes a growing token list without re-decoding all of it each step, and without
    emitting half a multi-byte character (byte-level BPE splits them across tokens)."""

    def __init__(self, tok):
        self.tok = tok
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0
        self.prefix_text = ""
        self.text = ""

    def push(self, new: list[int]) -> str:
        self.ids.extend(new)
        full = self.tok.decode(self.ids[self.prefix :], skip_special_tokens=True)
        if full.endswith("\ufffd") or len(full) <= len(self.prefix_text):
            return ""
        delta = full[len(self.prefix_text) :]
        # The next window starts at the tokens just consumed; its prefix text is decoded once here.
        self.prefix, self.read = self.read, len(self.ids)
        self.prefix_text = self.tok.decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        self.text += delta
        return delta
