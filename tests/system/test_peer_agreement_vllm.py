"""tokentop's serving bench agrees with `vllm bench serve` (the module, from the vLLM venv that the
vLLM tier uses) on the same real llama.cpp server and the same workload, the two tools taking turns
round by round (benchmarks/serving/peer_agreement.py: how, and where the definitions differ).

Held within 5 %: at concurrency 1 the means of a request's own pace (TTFT mean, TPOT mean, output
tok/s), read on the server's own clock: each turn's figures divided by the seconds the server's
counters say a prompt token and a generated token took in that turn, the wall phase by phase
(benchmarks/serving/server_clock.py, pool.py; means, as the counters are sums: a p50 so divided
moved 4-5 % beside itself under load, the means within 1 %). The tools measure different turns, and a one-CPU
server's pace moves between them: 13.4-18.2 ms a generated token from one round to the next under a
bursty load (2026-11-27), and a CI run saw every c1 figure of tokentop's 10-16 % off over 15 rounds
as measured, which the server's clock divides out where one request runs at a time. At a fixed rate
of 2/s, the output tok/s as measured (set by the schedule). At concurrency 8, only that every
request of both tools completes: a closed loop's throughput is the server's pace, and the two turns
of a round saw different ones (tokentop ÷ vLLM, round by round: 1.601, 1.050, 1.024, 0.958, 1.098 in
a CI run on 2026-11-28; 1.125, 0.998, 0.807, 1.429, 1.326 on an Intel Xeon on 2026-11-29, where the
same rounds' c1 figures on the server's clock were within 0.968-1.032). Not held, printed by the
benchmark: the TTFT p99 of a few dozen requests (their slowest one or two: 0.75-1.23 of the peer's
from one run to the next with either tool ahead); at concurrency 8 the TTFT p50, TPOT and ITL p50,
which follow how each tool's arrivals fill the server's 4 slots: llama.cpp batches the prompts that
have arrived when it starts a prefill, so a send burst a few milliseconds wider puts the first
request in a batch of its own (TTFT 130 ms rather than 364 ms for all eight), and a slot's time a
generated token moved 37-71 ms between one tool's own rounds (so no server clock serves there
either); and the 2/s cell's pace figures, which on this server, idle half of each second, move
0.80-1.30 from one round to the next. The second test holds TPOT, ITL p50 and output tok/s within 3
% in every cell, concurrency 8 included, before a server of fixed pace: there what differs is the
tools alone. Within 5 %, not 3: tokentop beside itself moves up to 5 % on this server
(docs/performance.md). Each figure is held as the median of its rounds' ratios, each round the two
tools back to back: a round where the server stalled in one tool's turn (a CI run on 2026-11-28 saw
c1 TTFT ratios of 0.478 and 0.196 in 2 of 15 rounds, the other 13 within 0.994-1.050) moves a pooled
mean by 8 % and the median of five not at all, while a tool's own bias shows in every round.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.serving.cpus import pin, split_cpus
from benchmarks.serving.peer_agreement import AGREEMENT_SERVER, compare
from benchmarks.serving.pool import FIGURES, Cell
from tests.helpers.vllm import SKIP, VLLM_PYTHON

pytestmark = [pytest.mark.vllm, pytest.mark.agreement]

TOLERANCE = 0.05
ROUNDS = 5
GAP_S = 0.016  # the fixed-pace stand-in's, between two chunks
HELD = {"c1": ("ttft_mean", "tpot_mean", "output_tok_s"), "c8": (), "r2/s": ("output_tok_s",)}
# Where one request runs at a time, the server's counters over a turn are its requests' own time:
# each turn's figures are read on the server's clock (benchmarks/serving/server_clock.py). Means, as the
# counters are sums: a p50 divided by a mean pace moved 4-5 % beside itself under load.
ON_SERVER_CLOCK = {"c1"}


def off_by(tools: dict, cell: str) -> list[str]:
    """The held figures of one cell whose median ratio over its rounds lies more than TOLERANCE from 1."""
    clock = cell in ON_SERVER_CLOCK

    def read(figures: dict) -> dict:
        return figures["server_clock"] if clock else figures

    peer, ours = tools["vllm"], tools["tokentop"]
    if clock and not ("server_clock" in peer and "server_clock" in ours):
        return [f"{cell}: a turn without the server's counters, so no figure on its clock"]
    off = []
    for title, key, _ in FIGURES:
        if key not in HELD[cell]:
            continue
        ratios = [read(o)[key] / read(p)[key] for o, p in zip(ours["rounds"], peer["rounds"], strict=True)]
        if abs(statistics.median(ratios) - 1) > TOLERANCE:
            where = " on the server's clock" if clock else ""
            each = ", ".join(f"{r:.3f}" for r in ratios)
            off.append(f"{cell} {title}: tokentop ÷ vllm, median of {len(ratios)} rounds{where}, {statistics.median(ratios):.3f} (each round's: {each})")
    return off


def test_tokentop_and_vllm_bench_serve_agree_within_5_percent():
    """A server of its own, on one CPU, the tools on the other (benchmarks/serving/cpus.py's
    split_cpus): the shared fixture's server would keep the pin after this test."""
    if not VLLM_PYTHON:
        pytest.skip(SKIP)
    from tests.helpers.llama_server import LlamaServer
    from tui_app.engine.models import converted_default

    split = split_cpus()
    if split is None:
        pytest.skip("one CPU: the server and the tools cannot be kept apart")
    server = LlamaServer(*AGREEMENT_SERVER)
    # c8 holds only that every request completes: one round. The 2/s tok/s is set by the schedule:
    # its rounds' ratios stayed within 1.002-1.041 where c1's moved 0.95-1.12 (docs/performance.md), so
    # a median of three holds it.
    cells = [Cell("c1", 1, None, 16), Cell("c8", 8, None, 16, rounds=1), Cell("r2/s", None, 2.0, 12, rounds=3)]
    try:
        pin(server.proc.pid, split[0])
        # Five rounds: with three, 4 of 8 runs on 2026-11-25 had a held figure 5-8 % off (a c1 TPOT
        # with tokentop ahead; r2/s TPOT and ITL p50, or TTFT p50, with the peer ahead).
        results = compare(server.url, str(converted_default()), cells, 16, 8, ROUNDS, VLLM_PYTHON, cpus=split[1])
    finally:
        server.close()
    off = []
    for cell, tools in results.items():
        peer, ours = tools["vllm"], tools["tokentop"]
        assert peer["failed"] == 0 and ours["failed"] == 0, (cell, peer["errors"], ours["errors"])
        assert peer["requests"] == ours["requests"] == len(ours["rounds"]) * next(c.requests for c in cells if c.name == cell)
        off += off_by(tools, cell)
    assert not off, "; ".join(off)


def test_before_a_server_of_fixed_pace_the_tools_agree_within_3_percent_and_tokentops_ttft_is_the_nearer():
    """Before the stand-in (tests/helpers/sse_standin.py: a chunk every 16 ms, no model, on one CPU,
    the tools on the other), what differs is the tools alone, not a one-CPU server's pace, which
    moves 3-5 % between turns with one tool on both sides (docs/performance.md). Held within 3 %
    of the peer in every cell: TPOT, ITL p50 and output tok/s. TTFT is held against the server's
    own (its arrival to its first chunk's write): tokentop's p50 lies above it, by the request's
    way there and back, and at concurrency 8 and 20/s no further above it than the peer's (3 %
    slack, and the spread of its own rounds' p50s, which is no fault of either tool's): the peer's
    path is the longer one (measured: tokentop 0.9 ms over the server's own at concurrency 1, 2 ms
    at 8; `vllm bench serve` 1.7-2.1 and 4-5.4 ms). At concurrency 1, less than half a chunk's gap
    above it (the comment below says why not nearer than the peer's)."""
    if not VLLM_PYTHON:
        pytest.skip(SKIP)
    from tests.helpers.sse_standin import SseStandIn
    from tui_app.engine.models import converted_default

    split = split_cpus()
    if split is None:
        pytest.skip("one CPU: the server and the tools cannot be kept apart")
    server = SseStandIn(gap_ms=GAP_S * 1000)
    try:
        pin(server.proc.pid, split[0])
        # c1 one round: before a fixed pace its figures are the same in either order (within 0.3 % of
        # the peer's, in each of five runs), and it was two thirds of the test's time.
        cells = [Cell("c1", 1, None, 12, rounds=1), Cell("c8", 8, None, 32), Cell("r20/s", None, 20.0, 32)]
        results = compare(server.url, str(converted_default()), cells, 64, 32, 3, VLLM_PYTHON, cpus=split[1], keep_alive=True, own_ttfts=server.take_ttfts)
    finally:
        server.close()
    off = []
    for cell, tools in results.items():
        peer, ours, own = tools["vllm"], tools["tokentop"], tools["server"]["ttft_p50"]
        assert peer["failed"] == 0 and ours["failed"] == 0
        for key in ("tpot_mean", "itl_p50", "output_tok_s"):
            if abs(ours[key] / peer[key] - 1) > 0.03:
                off.append(f"{cell} {key}: tokentop {ours[key]:.4g} ÷ vllm {peer[key]:.4g} = {ours[key] / peer[key]:.3f}")
        # No further than the peer's but for its own rounds' wander: at c8 the two lie 0-3 ms apart,
        # and a run of two rounds once put tokentop's 0.14 ms above the peer's, its rounds 0.8 ms apart.
        # At c1 the two ways differ by 0.5-0.9 ms of a tool's CPU, and a slow hour of this machine's
        # moved tokentop's alone by 1-3 ms (2026-12-02: 1.96 ms over the server's own against the
        # peer's 1.85 in CI, one round; 3.67 against 1.86 in a fresh clone, three rounds of four, its
        # parallel tier 16.6 min where 13.6): there it is held to lie after the server's own by less
        # than half a chunk's gap, so that a chunk miscounted or a clock off still fails.
        wander = max(r["ttft_p50"] for r in ours["rounds"]) - min(r["ttft_p50"] for r in ours["rounds"])
        bound = own + GAP_S / 2 if cell == "c1" else own + 1.03 * (peer["ttft_p50"] - own) + wander
        if not own <= ours["ttft_p50"] <= bound:
            off.append(f"{cell} TTFT p50: server {own * 1000:.2f} ms, tokentop {ours['ttft_p50'] * 1000:.2f}, vllm {peer['ttft_p50'] * 1000:.2f}")
    assert not off, "; ".join(off)
