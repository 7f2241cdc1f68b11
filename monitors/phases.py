"""Which phase of a generation each piece of its text belongs to: `thinking`, `answer` or `tool call`.

One source of truth for every source of tokens (a server's stream, the engine, a watched script):
- a server's own fields decide for themselves (`reasoning`, `reasoning_content`, `thinking`:
  thinking; `tool_calls`: a tool call), through `PhaseSplit.field`;
- text is read for the model's own markers (`PhaseSplit.feed`): a think span (`<think>` …
  `</think>`, the markers read from the model's tokenizer where there is one), a tool call's span
  (`<tool_call>` … `</tool_call>`), and Harmony's channels (`<|channel|>analysis<|message|>` is
  thinking, `final` the answer, `commentary to=…` a tool call).
The rules are those of the servers' reasoning parsers: a think span opens only before any answer
text (a `<think>` inside the answer, in a code block, is the answer's text), a close with no
opening is left as answer text (and counted, `stray`), and a span the stream never closes ends
as thinking (`unclosed`). The markers' own text belongs to the span they open or close, so the
phases' texts, joined, are the stream's text: nothing is dropped.

A marker can arrive split over pieces (`<`, `think`, `>`): text that may still be the start of
one waits, and `PhasedStream` holds the pieces that carry it, each with its tokens and its own
payload (an arrival time), until their phase is known. A source's clock is never moved: a piece
goes out late, stamped when it came. A source that has the model's tokenizer (the engine) reads
each marker as the one token it is (`atomic`): nothing waits, and a step goes out when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

THINKING, ANSWER, TOOL = "thinking", "answer", "tool call"
PHASES = (THINKING, ANSWER, TOOL)
SPANS = (("<think>", "</think>", THINKING), ("<tool_call>", "</tool_call>", TOOL))
HEADER_OPENS = ("<|start|>", "<|channel|>")  # Harmony: a message's header, up to its body
HEADER_END = "<|message|>"


def think_span(spans: tuple) -> tuple | None:
    """The think span among `spans`, by its phase: a tokenizer may have a tool call's markers and no think span's."""
    return next((span for span in spans if span[2] == THINKING), None)


def harmony_phase(header: str) -> str:
    """The phase of a Harmony message from its header (`<|start|>assistant<|channel|>final …`)."""
    channel = header.split("<|channel|>", 1)[-1].split(HEADER_END, 1)[0]
    name = channel.split()[0] if channel.split() else ""
    if name == "analysis":
        return THINKING
    if name == "commentary" and " to=" in f" {channel}":
        return TOOL
    return ANSWER


@dataclass
class PhaseSplit:
    """Text in, (phase, text) out, in order, as soon as each piece's phase is known.
    `thinking`: the span is open from the start (a chat template that ends its prompt with the
    open marker, as DeepSeek-R1's and Qwen3's thinking templates do). `atomic`: each marker comes
    whole, as one token's text (text that begins one is the text it is, and leading whitespace
    is the answer's)."""

    spans: tuple = SPANS
    thinking: bool = False
    atomic: bool = False
    phase: str = ANSWER
    closing: str | None = None  # the marker that ends the open span
    stray: int = 0  # closing markers with no opening: left as answer text
    buf: str = ""
    answered: bool = False  # answer text other than whitespace has gone out: no think span opens now
    header: bool = False

    def __post_init__(self) -> None:
        span = think_span(self.spans) if self.thinking else None
        if span is not None:
            self.phase, self.closing = THINKING, span[1]

    def quick(self, phase: str | None, text: str) -> str | None:
        """The phase of a piece decided whole without reading it (as `field` or `feed` would), where
        nothing waits and no marker can begin in it (each begins with `<`): most pieces of a
        stream; None where it must be read. Reading every piece cost 32 µs a chunk (docs/performance.md)."""
        if self.buf or self.header:
            return None
        if phase is not None:
            return phase
        if "<" in text or (not self.atomic and self.phase == ANSWER and not self.answered and not text.strip()):
            return None
        if self.phase == ANSWER and not self.answered and text.strip():
            self.answered = True
        return self.phase

    def field(self, phase: str, text: str) -> list[tuple[str, str]]:
        """A server's own field's text: its phase is the field's; text still waiting goes first."""
        return [*self._flush(), (phase, text)] if text else self._flush()

    def close(self) -> list[tuple[str, str]]:
        """The stream ended: what waits is decided as it stands."""
        return self._flush()

    def feed(self, text: str) -> list[tuple[str, str]]:
        self.buf += text
        out: list[tuple[str, str]] = []
        while self.buf:
            if self.header:
                end = self.buf.find(HEADER_END)
                if end < 0:
                    break
                cut = end + len(HEADER_END)
                head, self.buf, self.header = self.buf[:cut], self.buf[cut:], False
                self.phase, self.closing = harmony_phase(head), None
                self._out(out, self.phase, head)
                continue
            at, marker = self._next_marker()
            if marker is None:
                keep = 0 if self.atomic else self._partial()
                if not self.atomic and self.phase == ANSWER and not self.answered and not self.buf[: len(self.buf) - keep].strip():
                    break  # only whitespace yet: a think span may still open, and it would be the span's
                self._out(out, self.phase, self.buf[: len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep :]
                break
            before, rest = self.buf[:at], self.buf[at + len(marker) :]
            self.buf = rest
            if marker in HEADER_OPENS:
                self._out(out, self.phase, before)
                self.buf, self.header = marker + rest, True
            elif marker == self.closing:
                self._out(out, self.phase, before + marker)
                self.phase, self.closing = ANSWER, None
            elif any(marker == close for _, close, _ in self.spans):
                self.stray += 1
                self._out(out, self.phase, before + marker)
            else:
                close, phase = next((c, p) for o, c, p in self.spans if o == marker)
                if phase == THINKING and (before.strip() or self.answered):
                    self._out(out, self.phase, before + marker)  # the answer's text, as in a code block
                    continue
                if phase == THINKING:
                    self._out(out, THINKING, before + marker)  # leading whitespace is the span's
                else:
                    self._out(out, self.phase, before)
                    self._out(out, phase, marker)
                self.phase, self.closing = phase, close
        return out

    def _markers(self) -> list[str]:
        if self.closing is not None:
            return [self.closing, *HEADER_OPENS]
        opens = [o for o, _, p in self.spans if p != THINKING or not self.answered]
        return [*opens, *(c for _, c, _ in self.spans), *HEADER_OPENS]

    def _next_marker(self) -> tuple[int, str | None]:
        found = [(i, m) for m in self._markers() if (i := self.buf.find(m)) >= 0]
        return min(found) if found else (-1, None)

    def _partial(self) -> int:
        """How long a tail of the buffer may still begin a marker."""
        return max((k for m in self._markers() for k in range(1, len(m)) if self.buf.endswith(m[:k])), default=0)

    def _out(self, out: list, phase: str, text: str) -> None:
        if not text:
            return
        if phase == ANSWER and text.strip():
            self.answered = True
        if out and out[-1][0] == phase:
            out[-1] = (phase, out[-1][1] + text)
        else:
            out.append((phase, text))

    def _flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._out(out, self.phase, self.buf)
        self.buf, self.header = "", False
        return out


@dataclass
class Piece:
    text: str
    n: int  # tokens
    phase: str
    payload: object = None


@dataclass
class _Held:
    rest: str  # text whose phase is not known yet
    n: int
    payload: object
    parts: list = field(default_factory=list)  # (phase, text) known so far


class PhasedStream:
    """Pieces of a stream (text, tokens, payload) in; the same pieces out with their phases, a
    piece whose text spans two phases split in two (its tokens shared by the text's length, at
    least one each, the later phase first where there are fewer tokens than phases: a token
    that ends a span and begins the answer is the answer's)."""

    def __init__(self, split: PhaseSplit | None = None):
        self.split = split if split is not None else PhaseSplit()
        self._held: list[_Held] = []

    def push(self, parts: list[tuple[str | None, str]], n: int, payload: object = None) -> list[Piece]:
        """`parts`: (a server field's phase, or None for text to read for markers, text)."""
        if len(parts) == 1 and not self._held and (phase := self.split.quick(*parts[0])) is not None:
            return [Piece(parts[0][1], n, phase, payload)]
        held = _Held("".join(t for _, t in parts), n, payload)
        self._held.append(held)
        decided: list[tuple[str, str]] = []
        for phase, text in parts:
            decided += self.split.field(phase, text) if phase is not None else self.split.feed(text)
        return self._assign(decided)

    def close(self) -> list[Piece]:
        return self._assign(self.split.close())

    def _assign(self, decided: list[tuple[str, str]]) -> list[Piece]:
        out: list[Piece] = []
        for phase, text in decided:
            while text:
                head = self._held[0]
                k = min(len(head.rest), len(text))
                if k:
                    head.parts.append((phase, text[:k]))
                    head.rest, text = head.rest[k:], text[k:]
                if not head.rest:
                    out += self._release()
        out += self._release()
        return out

    def _release(self) -> list[Piece]:
        out: list[Piece] = []
        while self._held and not self._held[0].rest:
            h = self._held.pop(0)
            out += share(h.parts or [(self.split.phase, "")], h.n, h.payload)
        return out


def share(parts: list[tuple[str, str]], n: int, payload: object = None) -> list[Piece]:
    merged: list[list] = []
    for phase, text in parts:
        if merged and merged[-1][0] == phase:
            merged[-1][1] += text
        else:
            merged.append([phase, text])
    while len(merged) > max(n, 1):  # fewer tokens than phases: the earlier text joins the later
        first = merged.pop(0)
        merged[0][1] = first[1] + merged[0][1]
    counts = [1] * len(merged) if n >= len(merged) else [n]
    extra = n - sum(counts)
    chars = sum(len(t) for _, t in merged) or 1
    for i, (_, t) in enumerate(merged):
        counts[i] += extra * len(t) // chars
    counts[-1] += n - sum(counts)
    return [Piece(t, c, p, payload) for (p, t), c in zip(merged, counts, strict=True)]


def token_id(tok, text: str) -> int | None:
    """`text`'s id where it is one token of `tok`: a transformers tokenizer, or a `tokenizers`
    Tokenizer (a watched script's hook decodes with its own copy of one)."""
    if hasattr(tok, "token_to_id"):
        return tok.token_to_id(text)
    i = tok.convert_tokens_to_ids(text)
    return None if i is None or i == tok.unk_token_id else i


def marker_spans(tok) -> tuple:
    """The spans whose open and close are each one token of this tokenizer (read from it, never
    from a list of model names): a model without them has no phases."""
    return tuple(span for span in SPANS if token_id(tok, span[0]) is not None and token_id(tok, span[1]) is not None)


class StepPhases:
    """The phase of each step's text in one run of a source that has the model's tokenizer (the
    engine, a watched script): atomic, a marker being one token, so nothing waits. The run starts
    inside a think span where its prompt (a chat template's generation prompt) opened one and did
    not close it. Without markers every step is the answer, at no cost."""

    def __init__(self, tok, spans: tuple, prompt_ids: list[int]):
        opened = False
        self.thought = 0  # thinking tokens so far, the close included
        self.close_id: int | None = None
        self.open_id: int | None = None
        if (span := think_span(spans)) is not None:
            open_id, close_id = token_id(tok, span[0]), token_id(tok, span[1])
            self.open_id, self.close_id = open_id, close_id
            last = {t: i for i, t in enumerate(prompt_ids) if t in (open_id, close_id)}
            opened = last.get(open_id or -1, -1) > last.get(close_id or -1, -1)
        self.opened = opened
        self.split = PhaseSplit(spans=spans, thinking=opened, atomic=True) if spans else None

    def of(self, text: str, n: int) -> str:
        """The phase of a step of `n` tokens: that of the text they end in (a verify step's accepted
        drafts can cross a marker: its tokens are then the later phase's)."""
        if self.split is None:
            return ANSWER
        phase = self.split.quick(None, text)
        if phase is None:
            decided = self.split.feed(text)
            phase = decided[-1][0] if decided else self.split.phase
        if phase == THINKING:
            self.thought += n
        return phase

    def budgeted(self, rows: list[list[int]], budget: int) -> list[list[int]]:
        """A step's new tokens under a thinking budget: where the span would hold more than `budget`
        tokens with the next, that token is its close (as vLLM's `thinking_token_budget` and
        llama.cpp's `--reasoning-budget` end the thinking); a budget below 1 (no thinking) closes
        the span at its first token. Every row is the run's own sequence (a replicated batch: the
        engine refuses a budget beside distinct prompts)."""
        if not budget or self.split is None or self.split.phase != THINKING or self.thought < budget - 1:
            return rows
        close = self.close_id
        assert close is not None  # a split is made only with a span's markers, each one token
        return [[close] for _ in rows]

    def answer_start(self, out_ids: list[int]) -> int | None:
        """Where the answer begins in a run's new tokens: after its think span's close, or at 0 where
        no span was opened; None where the span never closed."""
        if self.close_id is not None and self.close_id in out_ids:
            return out_ids.index(self.close_id) + 1
        return None if self.opened or (self.open_id is not None and self.open_id in out_ids) else 0
