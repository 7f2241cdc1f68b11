"""A server's own tokenizer (llama.cpp's and vLLM's /tokenize and /detokenize), and prompts of an
exact token length made with it, for the serving benchmark's cells."""

from __future__ import annotations

import math
import random

from tui_app.prompts import reference_text

# Where this run's texts start: a server that served an earlier run's prompts would otherwise
# answer this run's from its prefix cache, and flatter its TTFT.
SALT = random.SystemRandom().randrange(1, 1_000_000)


class Prompts:
    """Prompts of a token length measured by the server's own tokenizer where it offers one
    (llama.cpp and vLLM: /tokenize and /detokenize), else cut by characters (about 4 a token)."""

    def __init__(self, client, texts: list[str] | None, shared_prefix: int):
        self.client = client
        self.texts = texts
        self.shared_prefix = shared_prefix
        self.exact = True
        self.ids: list[int] | bool | None = False  # False: not asked yet
        self.made = 0 if texts else SALT  # the next call's start: made texts start where no earlier run's did

    async def _tokens(self, text: str) -> list[int] | None:
        c = self.client
        for body in ({"content": text, "add_special": False}, {"model": c.model, "prompt": text, "add_special_tokens": False}):
            try:
                r = await c.http.post(c.root + "/tokenize", json=body, headers=c._headers, timeout=10)
            except Exception:  # noqa: BLE001 - no such endpoint, or not this shape: try the next
                continue
            if r.status_code == 200 and isinstance(r.json().get("tokens"), list):
                return [t if isinstance(t, int) else t.get("id") for t in r.json()["tokens"]]
        return None

    async def _text(self, tokens: list[int]) -> str | None:
        c = self.client
        for body, key in (({"tokens": tokens}, "content"), ({"model": c.model, "tokens": tokens}, "prompt")):
            try:
                r = await c.http.post(c.root + "/detokenize", json=body, headers=c._headers, timeout=10)
            except Exception:  # noqa: BLE001 - as above
                continue
            if r.status_code == 200 and isinstance(r.json().get(key), str):
                return r.json()[key]
        return None

    async def reference_ids(self) -> list[int] | None:
        """The reference text's tokens by the server's tokenizer (asked once)."""
        if self.ids is False:
            self.ids = await self._tokens(reference_text() * 2)
        return self.ids or None

    async def make(self, n_tokens: int, count: int) -> list[str]:
        """`count` prompts of about `n_tokens` tokens; different from each other after the shared
        prefix, and from every earlier call's (so no cell finds another's in the prefix cache)."""
        start, self.made = self.made, self.made + count
        if self.texts:
            return [self.texts[i % len(self.texts)] for i in range(start, start + count)]
        base = reference_text()
        ids = await self.reference_ids()
        out = []
        for i in range(start, start + count):
            text = await self.exact_text(_variant(ids, self.shared_prefix, i, n_tokens), ids) if ids else None
            if text is None:
                self.exact = False
                text = " ".join(_rotated(base.split(), self.shared_prefix, 5 * i) * 4)[: n_tokens * 4]
            out.append(text)
        return out

    async def exact_text(self, ids: list[int], reference: list[int]) -> str | None:
        """The text of `ids`, as many tokens long when the server tokenizes it again: two tokens side
        by side can merge into one (or one split in two) when the text is read again, so the tail is
        lengthened (or shortened) a token at a time. The head, a prefix shared with others, stays."""
        n = len(ids)
        text = None
        for k in range(6):
            text = await self._text(ids)
            back = await self._tokens(text) if text is not None else None
            if text is None or back is None or len(back) == n:
                return text
            ids = [*ids, reference[(n + k) % len(reference)]] if len(back) < n else ids[:-1]
        return text


def _variant(ids: list[int], keep: int, i: int, n: int) -> list[int]:
    """The `i`-th prompt of `n` tokens from the reference tokens: the first `keep` as they are, then
    the rest read from an offset of its own, with a stride of its own once the offsets run out (a
    stride coprime with the length visits every token once), repeated to length."""
    head, tail = ids[:keep], ids[keep:]
    if not tail:
        return (head * (n // max(len(head), 1) + 1))[:n]
    size = len(tail)
    strides = [s for s in range(1, min(size, 400)) if math.gcd(s, size) == 1]
    stride = strides[(i // size) % len(strides)]
    at = (7 * i) % size
    return (head + [tail[(at + j * stride) % size] for j in range(max(n - keep, 0))])[:n]


def _rotated(items: list, keep: int, by: int) -> list:
    """The first `keep` items, then the rest rotated by `by`: each request its own text after a shared prefix."""
    head, tail = items[:keep], items[keep:]
    k = by % len(tail) if tail else 0
    return head + tail[k:] + tail[:k]
