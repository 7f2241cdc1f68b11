"""A llama.cpp server's own pace over one tool's turn, from its /metrics counters read before and
after the turn: the seconds its prefill spent a prompt token, and its decode a generated token.

A one-CPU server's pace moves between turns with the machine's load (docs/performance.md: a
bursty load beside it moved one tool's TTFT p50 up to 9 % between its own turns), and the tools
measure different turns. Dividing each turn's figures by the server's own pace in that turn leaves
what the tools measure differently, not when they measured: the agreement test holds these.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from monitors.servers import MetricsParseError, parse_metrics

COUNTERS = {
    "prefill_s": "llamacpp:prompt_seconds_total",
    "prefill_n": "llamacpp:prompt_tokens_total",
    "decode_s": "llamacpp:tokens_predicted_seconds_total",
    "decode_n": "llamacpp:tokens_predicted_total",
}


@dataclass(frozen=True)
class Pace:
    """Seconds a token, on the server's clock, over one turn."""

    prefill_s: float  # a prompt token
    decode_s: float  # a generated token


def read(url: str) -> dict[str, float] | None:
    """The server's counters now; None where it has no llama.cpp /metrics (a stand-in, another engine)."""
    try:
        samples = parse_metrics(httpx.get(url + "/metrics", timeout=10).text)
    except (httpx.HTTPError, MetricsParseError):
        return None
    got = {key: samples.get(name) for key, name in COUNTERS.items()}
    return {key: s[0][1] for key, s in got.items() if s} if all(got.values()) else None


def between(before: dict[str, float] | None, after: dict[str, float] | None) -> Pace | None:
    """The turn's pace; None where either read failed or the turn computed no prompt or no token."""
    if before is None or after is None:
        return None
    d = {key: after[key] - before[key] for key in COUNTERS}
    if min(d.values()) <= 0:
        return None
    return Pace(d["prefill_s"] / d["prefill_n"], d["decode_s"] / d["decode_n"])
