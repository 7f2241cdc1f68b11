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

    def peek(self, more: list[int]) -> str:
        """The text `more` would add after the tokens so far, none of it kept (a rejected draft's)."""
        window = self.ids[self.prefix :]
        base = self.tok.decode(window, skip_special_tokens=True)
        return self.tok.decode(window + more, skip_special_tokens=True)[len(base) :].replace("\ufffd", "")


def step_text(text: IncrementalDecoder, new: list[int], accepted: int, rejected: list[int], each: bool) -> tuple[str, int, str, list[int]]:
    """A step's tokens `new` pushed to `text`: the text they make, how much of it from its start
    the accepted drafts (its first `accepted` tokens) made, the text the `rejected` drafts would
    have made after those (peeked, kept nowhere), and with `each`, the length of each token's own
    part (pushed one at a time, so each can carry its own probability)."""
    kept, own = new[:accepted], new[accepted:]
    parts = [text.push([t]) for t in kept] if each else [text.push(kept)] if kept else []
    drafted = sum(map(len, parts))
    ghost = text.peek(rejected) if rejected else ""
    parts += [text.push([t]) for t in own] if each else [text.push(own)] if own else []
    return "".join(parts), drafted, ghost, [len(part) for part in parts] if each else []
