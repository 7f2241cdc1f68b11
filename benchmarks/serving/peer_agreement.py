"""tokentop's serving bench beside the established ones, on the same server and the same workload:
`vllm bench serve` (vLLM's, the module in the vLLM venv) and, where installed, NVIDIA's AIPerf
(`make bench-agreement` puts it in a venv of its own). The target is one real llama.cpp server
(tests/helpers/llama_server.py) unless --url names another.

Cells: closed loop at concurrency 1 and 8, and a fixed rate (evenly spaced arrivals in every tool:
`--burstiness inf` in both vLLM and tokentop, so no tool draws a luckier Poisson schedule). The
tools take turns round by round (vLLM first in even rounds, tokentop first in odd), each round a
fresh set of prompts (a new --seed for vLLM's random ones; tokentop's own start anew each run), so
no tool finds the other's prompts in the server's prefix cache. Each figure is pooled over the
rounds' requests, then divided: tokentop ÷ peer.

Like with like, where the definitions differ:
- ITL: vLLM records a gap for every chunk with a `choices` entry, the last one included (llama.cpp
  ends each stream with a chunk that carries the finish reason and no token); tokentop's ITL is per
  token. "ITL p50" compares vLLM's gaps of its first output_len − 1 chunks (one a token here) with
  tokentop's; vLLM's own figure over every chunk is printed beside it ("ITL p50, every chunk").
- TPOT: both (e2e − TTFT) ÷ (tokens − 1) a request, the first token left out; vLLM's e2e ends at
  that last empty chunk, tokentop's at the last token (a gap of well under a millisecond here).
- output tok/s: the tokens over the run's wall time from the first send to the last end, no warm-up
  and no ramp inside it (AIPerf's: over its benchmark duration, the same span).
- AIPerf: its records' TTFT, inter-chunk gaps (the final empty chunk not among them) and request
  latency, pooled the same way; its start-up is outside the rounds, so it runs after the other two.
- vLLM's client (aiohttp) reuses a connection after llama.cpp's HTTP server has closed it (a
  request then fails with ServerDisconnectedError): its runs here send `Connection: close`, a TCP
  connect on loopback per request (tens of µs, against TTFTs of tens of ms).

The server it starts runs on one CPU and the tools on the others (`split_cpus`), as a GPU server's
work is not on its load generator's cores; `--shared-cpus` shares them.

    .venv/bin/python benchmarks/serving/peer_agreement.py [--rounds 3] [--lengths 64:32] [--rate 2]
        [--vllm-python ~/.cache/tokentop/vllm-venv/bin/python] [--aiperf PATH/bin/aiperf] [--url URL] [--shared-cpus]

`--self` puts tokentop in the peer's turns too: its ratios are the agreement's noise floor, how far
one tool's pooled figures move between turns when nothing but the moment differs.

`--standin MS` puts the tools before a server of fixed pace instead (tests/helpers/sse_standin.py: a
chunk every MS ms, no model), so what differs is the tools alone, not a one-CPU server's wander;
`--busy` runs a busy loop on the tools' CPU meanwhile, as a slower core leaves a client less of it;
`--bursty N` runs N loops on every CPU that come and go (0.3 s busy, 0.2 s idle), as other work on a
shared machine: the server's pace then moves between turns, and the table's last column divides
each turn's out by the server's own clock (server_clock.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serving import peer_aiperf, server_clock
from benchmarks.serving.cpus import busy_loop, on_cpus, pin, split_cpus
from benchmarks.serving.peer_vllm import VLLM_VENV, VllmBench, add_vllm
from benchmarks.serving.pool import FIGURES, Cell, Pooled
from monitors.timing import percentile

# llama.cpp serves max(slots + 2, cores - 1) connections at once (6 here) and queues the rest
# unaccepted: a client that keeps its connection alive keeps its place for its next request, one that
# closes it (vLLM's: peer_vllm.py) queues behind the waiting ones. At concurrency 8 the two tools' requests
# were then served in a different order (tokentop's output tok/s 1.10 of the peer's); with a
# connection each, only the 4 slots order them, for both.
AGREEMENT_SERVER = ("--slots", "4", "--http-threads", "16")


def tokentop_run(url: str, cell: Cell, p_len: int, new: int, workdir: Path, warmup: int, cpus: set[int] | None = None) -> dict:
    out = workdir / f"tokentop-{cell.name.replace('/', '')}"
    load = ["--concurrency", str(cell.concurrency)] if cell.concurrency else ["--rate", str(cell.rate), "--burstiness", "inf"]
    cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", url, "--lengths", f"{p_len}:{new}", *load]
    cmd += ["--requests", str(cell.requests), "--repeats", "1", "--warmup", str(warmup), "-o", "json", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, preexec_fn=on_cpus(cpus))
    if done.returncode not in (0, 1):
        raise RuntimeError(f"tokentop bench exited {done.returncode}: {done.stderr[-2000:]}")
    said = [line for line in done.stderr.splitlines() if line.startswith("tokentop:")]
    return {**json.loads(out.with_suffix(".json").read_text()), "said": said}


def add_tokentop(pool: Pooled, data: dict) -> None:
    (row,), (reqs,) = data["results"], data["requests"]
    for r in reqs:
        if not r["ok"]:
            pool.failed += 1
            pool.errors.append(f"{r['stop_reason']} after {r['tokens']} tokens; " + " / ".join(data.get("said") or []))
            continue
        pool.ttft.append(r["ttft_s"])
        pool.itl.extend(r["itl_s"])
        pool.itl_chunks.extend(r["itl_s"])
        if r["tpot_s"] is not None:
            pool.tpot.append(r["tpot_s"])
        pool.tokens += r["tokens"]
    pool.wall_s += row["wall_s"]


def compare(
    url: str,
    tokenizer: str,
    cells: list[Cell],
    p_len: int,
    new: int,
    rounds: int,
    vllm_python: str,
    aiperf: str | None = None,
    log=print,
    cpus: set[int] | None = None,
    peer: str = "vllm",
    keep_alive: bool = False,
    own_ttfts=None,
) -> dict:
    """Every cell, the tools taking turns round by round (`rounds`, or the cell's own), each on `cpus` when given;
    {cell: {tool: figures}}. `peer="self"`: tokentop in the peer's turns too, so the ratios show
    how far the same tool wanders from one turn to the next (the noise floor of an agreement).
    `own_ttfts`: where the server times its own first chunks (the stand-in), a call that returns
    and forgets them (s); their p50 over the cell is {cell: {"server": {"ttft_p50": …}}}."""
    with tempfile.TemporaryDirectory(prefix="tokentop-peers-") as tmp:
        work = Path(tmp)
        vllm = VllmBench(vllm_python, work, cpus) if peer == "vllm" else None
        try:
            out: dict = {}
            # A seed of this run's own: a server that served an earlier run's random prompts would
            # answer the peers' from its prefix cache (tokentop's start anew by themselves).
            base = random.SystemRandom().randrange(1, 1_000_000)
            for cell in cells:
                tools = (peer, "tokentop", *(("aiperf",) if aiperf else ()))
                pools, paced, per_round = ({t: f() for t in tools} for f in (Pooled, Pooled, list))
                server_ttfts: list[float] = []
                if own_ttfts is not None:
                    own_ttfts()  # what came before this cell
                clock = server_clock.read(url)  # a turn's reading after is the next one's before
                n = cell.rounds or rounds
                for k in range(n):
                    seed = base + 1000 * len(out) + k
                    warm = 1 if k == 0 else 0
                    order = (peer, "tokentop") if k % 2 == 0 else ("tokentop", peer)
                    for tool in order + (("aiperf",) if aiperf else ()):  # AIPerf after both: its start-up (~20 s) is inside neither's round
                        turn, before = Pooled(), clock
                        if tool == "aiperf":
                            peer_aiperf.add(turn, peer_aiperf.run(aiperf, url, tokenizer, cell, p_len, new, work, seed, cpus))
                        elif vllm is not None and tool == "vllm":
                            add_vllm(turn, vllm.run(url, tokenizer, cell, p_len, new, seed, keep_alive))
                        else:
                            add_tokentop(turn, tokentop_run(url, cell, p_len, new, work, warm, cpus))
                        pools[tool].absorb(turn)
                        per_round[tool].append(turn.figures())
                        clock = server_clock.read(url)
                        pace = server_clock.between(before, clock)
                        if pace is not None:
                            paced[tool].absorb(clocked := turn.on_server_clock(pace, cell.concurrency == 1))
                            per_round[tool][-1]["server_clock"] = clocked.figures()
                    log(f"{cell.name}: round {k + 1}/{n} done")
                    server_ttfts += own_ttfts() if own_ttfts is not None else []
                out[cell.name] = {
                    tool: {**p.figures(), "failed": p.failed, "errors": p.errors, "requests": len(p.ttft), "rounds": per_round[tool]}
                    | ({"server_clock": paced[tool].figures()} if len(paced[tool].ttft) == len(p.ttft) else {})
                    for tool, p in pools.items()
                }
                if server_ttfts:
                    out[cell.name]["server"] = {"ttft_p50": percentile(server_ttfts, 50), "requests": len(server_ttfts)}
            return out
        finally:
            if vllm is not None:
                vllm.close()


def table(results: dict) -> str:
    peers = sorted({t for tools in results.values() for t in tools if t not in ("tokentop", "server")}, key=lambda t: t != "vllm")
    lines = []
    for peer in peers:
        name = {"vllm": "vllm bench serve", "aiperf": "AIPerf", "self": "itself, in the peer's turns"}[peer]
        lines += [f"tokentop beside {name} (ratio tokentop ÷ peer; then with each turn's server pace divided out):", ""]
        lines += ["| cell | figure | peer | tokentop | ratio | on the server's clock |", "|---|---|---|---|---|---|"]
        for cell, tools in results.items():
            if peer not in tools:
                continue
            a, b = tools[peer], tools["tokentop"]
            for title, key, is_ms in FIGURES:
                if a.get(key) != a.get(key):  # NaN: the peer has no such figure
                    continue
                show = (lambda x: f"{x * 1000:.2f} ms") if is_ms else (lambda x: f"{x:.1f}")
                clocked = b["server_clock"][key] / a["server_clock"][key] if "server_clock" in a and "server_clock" in b else math.nan
                clock = "-" if math.isnan(clocked) else f"{clocked:.3f}"
                lines.append(f"| {cell} | {title} | {show(a[key])} | {show(b[key])} | {b[key] / a[key]:.3f} | {clock} |")
            if peer == "vllm":
                chunks = a["itl_p50_chunks"]
                ours = b["itl_p50"]
                lines.append(f"| {cell} | ITL p50, every chunk (vLLM's own) | {chunks * 1000:.2f} ms | {ours * 1000:.2f} ms | {ours / chunks:.3f} | - |")
        lines.append("")
    own = [(cell, tools) for cell, tools in results.items() if "server" in tools]
    if own:
        lines += ["TTFT p50 against the server's own (its arrival to its first chunk's write), ms:", ""]
        lines += ["| cell | server | " + " | ".join(t for t in own[0][1] if t != "server") + " |", "|---|---|" + "---|" * (len(own[0][1]) - 1)]
        for cell, tools in own:
            tools_ms = " | ".join(f"{f['ttft_p50'] * 1000:.2f}" for t, f in tools.items() if t != "server")
            lines.append(f"| {cell} | {tools['server']['ttft_p50'] * 1000:.2f} | {tools_ms} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running llama.cpp server (default: start one, 4 slots, a connection each)")
    p.add_argument("--lengths", default="64:32")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=2.0, help="the fixed-rate cell's requests/s")
    p.add_argument("--requests", type=int, default=16, help="requests a round (c1's: half)")
    p.add_argument("--vllm-python", default=str(VLLM_VENV / "bin" / "python"))
    p.add_argument("--aiperf", default=None, help="AIPerf's command (make bench-agreement installs it)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--shared-cpus", action="store_true", help="the server it starts and the tools share every CPU (default: split)")
    p.add_argument("--self", action="store_true", help="tokentop beside itself (A/A): the noise floor of the agreement")
    p.add_argument("--standin", type=float, default=None, metavar="MS", help="a server of fixed pace, a chunk every MS ms, in place of llama.cpp")
    p.add_argument("--busy", action="store_true", help="a busy loop on the tools' CPU throughout")
    p.add_argument("--bursty", type=int, default=0, metavar="N", help="N loops on every CPU, 0.3 s busy then 0.2 s idle, throughout")
    args = p.parse_args()
    from tui_app.engine.models import converted_default

    p_len, new = (int(x) for x in args.lengths.split(":"))
    tokenizer = str(converted_default())
    cells = [Cell("c1", 1, None, max(args.requests // 2, 2)), Cell("c8", 8, None, args.requests), Cell(f"r{args.rate:g}/s", None, args.rate, args.requests)]
    server, split, hogs = None, None, []
    if args.url is None:
        from tests.helpers.llama_server import LlamaServer
        from tests.helpers.sse_standin import SseStandIn

        server = SseStandIn(args.standin) if args.standin else LlamaServer(*AGREEMENT_SERVER)
        split = None if args.shared_cpus else split_cpus()
        if split is not None:
            pin(server.proc.pid, split[0])
    url = args.url or server.url
    try:
        if args.busy:
            hogs.append(busy_loop(split[1] if split else set(os.sched_getaffinity(0))))
        hogs += [busy_loop(set(os.sched_getaffinity(0)), bursty=True) for _ in range(args.bursty)]
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
        peer = "self" if args.self else "vllm"
        results = compare(
            url,
            tokenizer,
            cells,
            p_len,
            new,
            args.rounds,
            args.vllm_python,
            args.aiperf,
            log=log,
            cpus=split and split[1],
            peer=peer,
            keep_alive=bool(args.standin),
            own_ttfts=server.take_ttfts if args.standin else None,
        )
    finally:
        for hog in hogs:
            hog.kill()
        if server is not None:
            server.close()
    where = f"; the server on CPU {sorted(split[0])}, the tools on {sorted(split[1])}" if split else ""
    what = f"a stand-in sending a chunk every {args.standin:g} ms" if args.standin else "llama.cpp"
    where += "; a busy loop beside the tools" if args.busy else ""
    where += f"; {args.bursty} bursty loops on every CPU" if args.bursty else ""
    print(f"{what} at {url}, {p_len} prompt tokens, {new} out (ignore-eos), {args.rounds} rounds interleaved{where}\n")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
