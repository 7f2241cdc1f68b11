"""A server's own tokenizer (llama.cpp's and vLLM's /tokenize and /detokenize), and prompts of an
exact token length made with it, for the serving benchmark's cells."""

from __future__ import annotations

from tui_app.prompts import reference_text


class Prompts:
    """Prompts of a token length measured by the server's own tokenizer where it offers one
    (llama.cpp and vLLM: /tokenize and /detokenize), else cut by characters (about 4 a token)."""

    def __init__(self, client, texts: list[str] | None, shared_prefix: int):
        self.client = client
        self.texts = texts
        self.shared_prefix = shared_prefix
        self.exact = True

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

    async def make(self, n_tokens: int, count: int) -> list[str]:
        """`count` prompts of about `n_tokens` tokens; different from each other after the shared prefix."""
        if self.texts:
            return [self.texts[i % len(self.texts)] for i in range(count)]
        base = reference_text()
        ids = await self._tokens(base * 2)
        out = []
        for i in range(count):
            if ids:
                text = await self._text((_rotated(ids, self.shared_prefix, 7 * i) * (n_tokens // len(ids) + 1))[:n_tokens])
                if text is not None:
                    out.append(text)
                    continue
            self.exact = False
            out.append(" ".join(_rotated(base.split(), self.shared_prefix, 5 * i) * 4)[: n_tokens * 4])
        return out


def _rotated(items: list, keep: int, by: int) -> list:
    """The first `keep` items, then the rest rotated by `by`: each request its own text after a shared prefix."""
    head, tail = items[:keep], items[keep:]
    k = by % len(tail) if tail else 0
    return head + tail[k:] + tail[:k]
