"""Lever effects: decode tok/s and TTFT of each lever ÷ the plain configuration, at 10 and 400
prompt tokens, with the output's quality beside it (first token differing from plain greedy,
perplexity of the reference text).

Each lever is measured interleaved with plain (plain, lever, plain, lever, …; one warm run of each
first), and its ratio is the median of the pairs' ratios with their range: this VM's speed swings
by a third within minutes, so a lever measured as its own block after plain's would carry that
swing into its ratio. Rates are wall-clock (monitors/timing.py).

    .venv/bin/python benchmarks/levers.py [--levers no-cache,int8,...] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tui_app.commands.bench import apply_levers, parse_levers, prompt_of_length
from tui_app.core import fmt
from tui_app.core.session import Session
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest

DEFAULT = "no-cache,compile,int8,int4,lookup,draft,b4,int8+compile,int4+compile"


def median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levers", default=DEFAULT)
    ap.add_argument("--prompt-lengths", default="10,400")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="plain/lever pairs per lever (at least 5 for a median with a range)")
    args = ap.parse_args()
    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    combos = [(name, combo) for name, combo in parse_levers(args.levers) if combo]  # plain is every pair's other half
    lengths = [int(x) for x in args.prompt_lengths.split(",")]

    def run(req, combo):
        refused = apply_levers(engine, combo)
        if refused:
            return refused, None
        fin = engine.run(req)
        return fin, session.timer.runs[fin.run_id].total

    rows = []
    for n in lengths:
        req = RunRequest(prompt_ids=prompt_of_length(engine.tok, n), max_new_tokens=args.new, ignore_eos=True)
        run(req, {})  # warm, and the greedy reference every lever's output is compared with
        for name, combo in combos:
            fin, _ = run(req, combo)  # warm: a lever's preparation (quantize, compile) is not timed
            if isinstance(fin, str):
                rows.append((name, n, fin, None))
                continue
            pairs = []
            for _ in range(args.repeats):
                _, plain = run(req, {})
                fin, lever = run(req, combo)
                pairs.append((plain, lever))
            rows.append((name, n, fin, pairs))
            print(f"  {name} @ {n}: {statistics.median(lev.decode_tps for _, lev in pairs):.1f} tok/s", file=sys.stderr, flush=True)
    r0 = engine.ready
    print(
        f"\n{r0.model} on {r0.device} ({r0.dtype}, {r0.threads} threads), {args.new} new tokens; each lever interleaved with plain, "
        f"{args.repeats} pairs after one warm run each; × plain: the median of the pairs' ratios (range)\n"
    )
    print("| lever | prompt | decode tok/s | × plain | TTFT | × plain | accept | ppl | output vs plain greedy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, fin, pairs in rows:
        if pairs is None:
            print(f"| {name} | {n} | refused: {fin} | | | | | | |")
            continue
        lever = [lev for _, lev in pairs]
        print(
            f"| {name} | {n} | {fmt.num(statistics.median(s.decode_tps for s in lever))} "
            f"| {median_range([lev.decode_tps / p.decode_tps for p, lev in pairs])} "
            f"| {fmt.ms(statistics.median(s.ttft_s for s in lever))} | {median_range([lev.ttft_s / p.ttft_s for p, lev in pairs])} "
            f"| {fmt.pct(lever[-1].accept_rate)} | {fmt.num(fin.perplexity, 2)} | {fin.diff_note} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
