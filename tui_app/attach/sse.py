"""A completion stream's chunks read one at a time: the text each brings and how many tokens, by
the server's own running count where the stream carries one (llama.cpp `timings.predicted_n`, vLLM
and SGLang `continuous_usage_stats`), else one per chunk with text. Pure: no network, no clock;
the client (client.py) timestamps each chunk and turns each token-bearing one into a Step. And
a run's text against the server's first answer to the same request (Answers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

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

    def server_total(self) -> int | None:
        """The server's final count of the tokens it generated, where it said one."""
        if self.usage and self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"])
        if self.timings and self.timings.get("predicted_n") is not None:
            return int(self.timings["predicted_n"])
        return None


class ChunkReader:
    """Reads one stream's SSE data into `out`; `read(data)` says what a chunk brought as a step."""

    def __init__(self, out: StreamResult | None = None):
        self.out = out if out is not None else StreamResult()
        self.pending = ""  # text without a token of its own: it goes out with the next token
        self.prompt_n: int | None = None

    def read(self, data: str) -> tuple[str, int] | None:
        """(text, tokens) of a chunk that brings tokens; None for one that brings none (empty,
        malformed, usage only, text the server has not counted yet). A [DONE] or an error sets
        `out.done` or `out.error`: the stream is over."""
        out = self.out
        data = data.strip()
        if not data:
            return None
        if data == "[DONE]":
            out.done = True
            return None
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            out.malformed += 1
            return None
        if not isinstance(obj, dict):
            out.malformed += 1
            return None
        if obj.get("error"):
            out.error = f"the server sent an error mid-stream: {error_text(json.dumps(obj))}"
            return None
        choices = obj.get("choices") or []
        running = self._running_count(obj, choices)
        if not choices or not isinstance(choices[0], dict):
            return None
        c = choices[0]
        delta = c.get("delta")
        text = (delta.get("content") if isinstance(delta, dict) else None) or c.get("text") or ""
        if c.get("finish_reason"):
            out.finish = c["finish_reason"]
        out.chunks += 1 if text else 0
        if running is not None:
            n = max(int(running) - out.counted, 0)
            out.from_server = True
        else:
            n = 1 if text else 0
        if n == 0:
            self.pending += text
            return None
        text, self.pending = self.pending + text, ""
        out.counted += n
        out.text += text
        if self.prompt_n is not None:
            out.context = self.prompt_n + out.counted
        return text, n

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

    def close(self) -> None:
        """The stream ended: text still waiting for a token of its own is the output's end."""
        self.out.text += self.pending
        self.pending = ""


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
