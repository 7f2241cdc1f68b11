"""A completion stream's chunks read one at a time: the text each brings and how many tokens, by
the server's own running count where the stream carries one (llama.cpp `timings.predicted_n`, vLLM
and SGLang `continuous_usage_stats`), else one per chunk with text. Pure: no network, no clock;
the client (client.py) timestamps each chunk and turns each token-bearing one into a Step. And
a run's text against the server's first answer to the same request (Answers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from monitors.phases import THINKING, TOOL, PhasedStream, Piece
from tui_app.attach.errors import error_text

STOP_REASONS = {"stop": "eos", "length": "max tokens", "eos_token": "eos", "abort": "stopped"}


@dataclass
class StreamResult:
    text: str = ""
    counted: int = 0  # tokens counted from the stream (server running count, or chunks)
    chunks: int = 0
    from_server: bool = False  # counts came from the server's running count
    finish: str | None = None
    usage: dict | None = None
    timings: dict | None = None
    malformed: int = 0
    error: str = ""
    context: int = 0  # tokens in this stream's context now (prompt + cached + generated), when known
    done: bool = False  # the stream said [DONE]
    stray: int = 0  # think spans' closing markers with no opening, left as answer text

    def server_total(self) -> int | None:
        """The server's final count of the tokens it generated, where it said one."""
        if self.usage and self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"])
        if self.timings and self.timings.get("predicted_n") is not None:
            return int(self.timings["predicted_n"])
        return None


REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")  # vLLM, Ollama; llama.cpp, SGLang, DeepSeek; others


def delta_parts(c: dict) -> list[tuple[str | None, str]]:
    """A choice's text as (phase, text) parts in the order a server switches: its reasoning field,
    then the content (None: read for the model's markers), then a tool call's name and arguments."""
    delta: dict = c["delta"] if isinstance(c.get("delta"), dict) else {}
    parts: list[tuple[str | None, str]] = [(THINKING, v) for k in REASONING_FIELDS if isinstance(v := delta.get(k), str) and v]
    content = delta.get("content") or c.get("text")
    if isinstance(content, str) and content:
        parts.append((None, content))
    for call in delta.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            name, args = fn.get("name"), fn.get("arguments")
            text = (f"{name} " if isinstance(name, str) else "") + (args if isinstance(args, str) else "")
            if text:
                parts.append((TOOL, text))
    return parts


class ChunkReader:
    """Reads one stream's SSE data into `out`; `read(data, t)` says what the chunk (arrived at `t`)
    and those waiting before it brought, as pieces of one phase each (monitors/phases.py)."""

    def __init__(self, out: StreamResult | None = None):
        self.out = out if out is not None else StreamResult()
        self.pending: list[tuple[str | None, str]] = []  # text without a token of its own: it goes out with the next token
        self.prompt_n: int | None = None
        self.phases = PhasedStream()

    def read(self, data: str, t: int = 0) -> list[Piece]:
        """The pieces (text, tokens, phase, arrival) whose phase is known now: none for a chunk that
        brings no token (empty, malformed, usage only, text the server has not counted yet), or
        whose text may still begin a marker. A [DONE] or an error sets `out.done` or `out.error`:
        the stream is over."""
        out = self.out
        data = data.strip()
        if not data:
            return []
        if data == "[DONE]":
            out.done = True
            return []
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            out.malformed += 1
            return []
        if not isinstance(obj, dict):
            out.malformed += 1
            return []
        if obj.get("error"):
            out.error = f"the server sent an error mid-stream: {error_text(json.dumps(obj))}"
            return []
        choices = obj.get("choices") or []
        running = self._running_count(obj, choices)
        if not choices or not isinstance(choices[0], dict):
            return []
        c = choices[0]
        parts = delta_parts(c)
        if c.get("finish_reason"):
            out.finish = c["finish_reason"]
        out.chunks += 1 if parts else 0
        if running is not None:
            n = max(int(running) - out.counted, 0)
            out.from_server = True
        else:
            n = 1 if parts else 0
        if n == 0:
            self.pending += parts
            return []
        parts, self.pending = self.pending + parts, []
        out.counted += n
        out.text += "".join(text for _, text in parts)
        if self.prompt_n is not None:
            out.context = self.prompt_n + out.counted
        return self.phases.push(parts, n, t)

    def _running_count(self, obj: dict, choices: list) -> int | None:
        """The server's count of generated tokens so far, where this chunk carries one (and the prompt's size)."""
        out = self.out
        usage, timings = obj.get("usage"), obj.get("timings")
        if usage:
            out.usage = usage
        if isinstance(timings, dict):
            out.timings = timings
            self.prompt_n = (timings.get("prompt_n") or 0) + (timings.get("cache_n") or 0)
            return timings.get("predicted_n")
        if isinstance(usage, dict) and choices:  # continuous usage stats: a running count on each chunk
            self.prompt_n = usage.get("prompt_tokens")
            return usage.get("completion_tokens")
        return None

    def close(self, keep_pending: bool = True) -> list[Piece]:
        """The stream ended: text still waiting for a token of its own is the output's end (unless
        it ended in an error), and the pieces still waiting on a marker go out as they stand."""
        if keep_pending:
            self.out.text += "".join(text for _, text in self.pending)
        self.pending = []
        pieces = self.phases.close()
        self.out.stray = self.phases.split.stray
        return pieces


def run_end(streams: list[StreamResult], stopped: bool) -> tuple[str, int, int | None, dict]:
    """What a run's streams say at its end: (why it ended, its tokens — by the server's final
    counts where it gave them —, its prompt's tokens, the server's own figures for RunFinished.server),
    the first stream's standing for the run."""
    lead = streams[0]
    if stopped:
        reason = "stopped"
    elif lead.error:
        reason = "error"
    else:
        reason = STOP_REASONS.get(lead.finish or "", lead.finish or "stream ended")
    server_counts = [s.server_total() for s in streams]
    n_tokens = sum(c if c is not None else s.counted for c, s in zip(server_counts, streams, strict=True))
    usage = lead.usage or {}
    prompt_tokens = usage.get("prompt_tokens")
    if prompt_tokens is None and lead.timings:
        prompt_tokens = (lead.timings.get("prompt_n") or 0) + (lead.timings.get("cache_n") or 0)
    details = {
        "tokens_from": "server running count" if lead.from_server else "chunks (the server streams no running count)",
        "chunks": lead.chunks,
        "server_tokens": server_counts[0],
        "cached_tokens": ((usage.get("prompt_tokens_details") or {}).get("cached_tokens") if usage else None)
        if not lead.timings
        else lead.timings.get("cache_n"),
    }
    reasoning = ((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")) if usage else None
    if reasoning is not None:
        details["server_reasoning_tokens"] = reasoning
    if lead.stray:
        details["thinking"] = f"{lead.stray} closing marker(s) with no opening, left as answer text"
    if lead.timings:
        for key in ("prompt_ms", "prompt_n", "predicted_ms", "predicted_n", "predicted_per_token_ms", "predicted_per_second"):
            details[key] = lead.timings.get(key)
    return reason, n_tokens, prompt_tokens, details


class Answers:
    """Greedy output against this server's first greedy answer to the same request: a server that
    batches or runs speculation may not be deterministic, and this shows it."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self._first: dict[tuple, str] = {}

    def note(self, key: tuple, text: str, reason: str) -> str:
        """The runs table's note for this answer to the request `key`; the first complete one is the reference."""
        if self.temperature > 0:
            return "sampled: not compared"
        if reason not in ("eos", "max tokens"):
            return reason
        ref = self._first.get(key)
        if ref is None:
            self._first[key] = text
            return "reference"
        if ref == text:
            return "identical"
        at = next((i for i, (a, b) in enumerate(zip(ref, text, strict=False)) if a != b), min(len(ref), len(text)))
        return f"differs at char {at}"
