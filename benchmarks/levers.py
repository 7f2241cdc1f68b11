"""Lever effects: decode tok/s and TTFT of each lever ÷ the plain configuration, at 10 and 400
prompt tokens, with the output's quality beside it (first token differing from plain greedy,
perplexity of the reference text). Measured side by side in one process.

    .venv/bin/python benchmarks/levers.py [--levers plain,no-cache,int8,...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tui_app import fmt
from tui_app.bench import measure, parse_levers
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.session import Session

DEFAULT = "plain,no-cache,compile,int8,int4,lookup,draft,b4,int8+compile,int4+compile"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levers", default=DEFAULT)
    ap.add_argument("--prompt-lengths", default="10,400")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    session = Session()
    errors: list[str] = []
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    combos = parse_levers(args.levers)
    lengths = [int(x) for x in args.prompt_lengths.split(",")]
    results = {}
    for n in lengths:
        for name, combo in combos:
            results[(name, n)] = measure(engine, session, errors, name, combo, n, args.new, 1, args.repeats, lambda: None)
            r = results[(name, n)]
            print(f"  {name} @ {n}: {'refused ' + r.refused if r.refused else fmt.num(r.tps.mean) + ' tok/s'}", file=sys.stderr, flush=True)
    r0 = engine.ready
    print(f"\n{r0.model} on {r0.device} ({r0.dtype}, {r0.threads} threads), {args.new} new tokens, 1 warmup + {args.repeats} repeats\n")
    print("| lever | prompt | decode tok/s | ×plain | TTFT | ×plain | accept | ppl | output vs plain greedy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        base = results[("plain", n)]
        for name, _ in combos:
            r = results[(name, n)]
            if r.refused:
                print(f"| {name} | {n} | refused: {r.refused} | | | | | | |")
                continue
            print(
                f"| {name} | {n} | {fmt.num(r.tps.mean)} | {r.tps.mean / base.tps.mean:.2f} | {fmt.ms(r.ttft.mean)} "
                f"| {r.ttft.mean / base.ttft.mean:.2f} | {fmt.pct(r.accept_rate)} | {fmt.num(r.perplexity, 2)} | {r.diff_note} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
