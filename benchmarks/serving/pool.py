"""What the agreement's tools are compared on (benchmarks/serving/peer_agreement.py): a cell of the
workload, and the requests of one tool's turns in it pooled, with the figures computed from them.
Each tool's own module (peer_vllm.py, peer_aiperf.py, tokentop's in peer_agreement.py) adds its
requests to a pool as the others' are."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.serving.server_clock import Pace
from monitors.timing import mean, percentile

FIGURES = (
    ("TTFT p50", "ttft_p50", True),
    ("TTFT mean", "ttft_mean", True),
    ("TTFT p99", "ttft_p99", True),
    ("TPOT mean", "tpot_mean", True),
    ("ITL p50", "itl_p50", True),
    ("output tok/s", "output_tok_s", False),
)


@dataclass
class Cell:
    name: str  # c1, c8, r2/s
    concurrency: int | None  # closed loop
    rate: float | None  # evenly spaced arrivals
    requests: int
    # Fewer rounds than the comparison's where a cell holds less: a cell held only to complete needs
    # one, and a figure set by the arrivals' schedule does not wander as a pace does.
    rounds: int | None = None


@dataclass
class Pooled:
    """Requests of every round of one tool on one cell: what its figures are computed from."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)  # per token (one a chunk on llama.cpp)
    itl_chunks: list[float] = field(default_factory=list)  # vLLM: every chunk's gap, its own definition
    tpot: list[float] = field(default_factory=list)
    tokens: int = 0
    wall_s: float = 0.0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # why, where the tool said

    def absorb(self, other: Pooled) -> None:
        self.ttft += other.ttft
        self.itl += other.itl
        self.itl_chunks += other.itl_chunks
        self.tpot += other.tpot
        self.tokens += other.tokens
        self.wall_s += other.wall_s
        self.failed += other.failed
        self.errors += other.errors

    def on_server_clock(self, pace: Pace, one_at_a_time: bool) -> Pooled:
        """The same requests with the server's own pace of their turn divided out: TTFT in its
        prompt tokens' time, gaps and TPOT in its generated tokens' (server_clock.py). The wall
        likewise, phase by phase: where one request runs at a time, its TTFTs are the turn's prefill
        and the rest its decode and the gaps between requests. A prefill of 16 tokens is half of such
        a wall on a one-CPU llama.cpp, and its pace moves apart from the decode's: the whole wall in
        decode time put 0.943-1.065 of the peer's into a c1 output tok/s whose rounds held 0.997-1.019
        so split (docs/performance.md). Where requests overlap, no such split exists: no tok/s."""
        per_decode = [[x / pace.decode_s for x in xs] for xs in (self.itl, self.itl_chunks, self.tpot)]
        prefill = sum(self.ttft)
        wall = prefill / pace.prefill_s + (self.wall_s - prefill) / pace.decode_s if one_at_a_time else 0.0
        return Pooled([x / pace.prefill_s for x in self.ttft], *per_decode, self.tokens, wall, self.failed)

    def figures(self) -> dict[str, float]:
        return {
            "ttft_p50": percentile(self.ttft, 50),
            "ttft_mean": mean(self.ttft),
            "ttft_p99": percentile(self.ttft, 99),
            "tpot_mean": mean(self.tpot),
            "itl_p50": percentile(self.itl, 50),
            "itl_p50_chunks": percentile(self.itl_chunks, 50),
            "output_tok_s": self.tokens / self.wall_s if self.wall_s else float("nan"),
        }
