"""Lever effects: decode tok/s and TTFT of each lever ÷ the plain configuration, at 10 and 400
prompt tokens, with the output's quality beside it (first token differing from plain greedy,
perplexity of the reference text).

Each lever is measured interleaved with plain (plain, lever, plain, lever, …; one warm run of each
first), and its ratio is the median of the pairs' ratios with their range: this VM's speed swings
by a third within minutes, so a lever measured as its own block after plain's would carry that
swing into its ratio. Rates are wall-clock (monitors/timing.py).

`--kernels best,portable` measures each body of the CPU kernels (engine/native.py) in a process of
its own, one after the other in one run, and sets their ratios side by side: plain is the same
fp32 path in each, so it is each one's yardstick.

    .venv/bin/python benchmarks/engine/levers.py [--levers no-cache,int8,...] [--repeats 5] [--kernels best,portable]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import median_range

DEFAULT = "no-cache,compile,int8,int4,lookup,draft,b4,int8+compile,int4+compile"


def measure(args) -> dict:
    """Each lever's pairs with plain, in this process: rows of plain figures, ready for JSON."""
    from tui_app.commands.bench import apply_levers, parse_levers, prompt_of_length
    from tui_app.core.session import Session
    from tui_app.engine import native
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.requests import RunRequest

    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    combos = [(name, combo) for name, combo in parse_levers(args.levers) if combo]  # plain is every pair's other half

    def run(req, combo):
        refused = apply_levers(engine, combo)
        if refused:
            return refused, None
        fin = engine.run(req)
        return fin, session.timer.runs[fin.run_id].total

    rows = []
    for n in [int(x) for x in args.prompt_lengths.split(",")]:
        req = RunRequest(prompt_ids=prompt_of_length(engine.tok, n), max_new_tokens=args.new, ignore_eos=True)
        run(req, {})  # warm, and the greedy reference every lever's output is compared with
        for name, combo in combos:
            fin, _ = run(req, combo)  # warm: a lever's preparation (quantize, compile) is not timed
            if isinstance(fin, str):
                rows.append({"lever": name, "prompt": n, "refused": fin})
                continue
            pairs = []
            for _ in range(args.repeats):
                _, plain = run(req, {})
                fin, lever = run(req, combo)
                pairs.append((plain, lever))
            rows.append(
                {
                    "lever": name,
                    "prompt": n,
                    "tok_s": [lev.decode_tps for _, lev in pairs],
                    "tok_s_ratio": [lev.decode_tps / p.decode_tps for p, lev in pairs],
                    "ttft_s": [lev.ttft_s for _, lev in pairs],
                    "ttft_ratio": [lev.ttft_s / p.ttft_s for p, lev in pairs],
                    "accept": pairs[-1][1].accept_rate,
                    "ppl": fin.perplexity,
                    "diff": fin.diff_note,
                }
            )
            print(f"  [{native.mode()}] {name} @ {n}: {statistics.median(rows[-1]['tok_s']):.1f} tok/s", file=sys.stderr, flush=True)
    r0 = engine.ready
    return {"mode": native.mode(), "body": native.isa(), "head": f"{r0.model} on {r0.device} ({r0.dtype}, {r0.threads} threads)", "rows": rows}


def child(args, mode: str) -> dict:
    """measure() in a process whose kernels are built in `mode` (a process keeps the body it loaded)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--levers", args.levers, "--prompt-lengths", args.prompt_lengths]
    cmd += ["--new", str(args.new), "--repeats", str(args.repeats)]
    done = subprocess.run(cmd, env={**os.environ, "TOKENTOP_CPU_KERNELS": mode}, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"levers.py: the {mode} run exited {done.returncode}")
    return json.loads(done.stdout)


def print_tables(results: list[dict], args) -> None:
    from tui_app.core import fmt

    first = results[0]
    print(
        f"\n{first['head']}, {args.new} new tokens; each lever interleaved with plain, {args.repeats} pairs after one warm run "
        "each; × plain: the median of the pairs' ratios (range)\n"
    )
    for res in results:
        if len(results) > 1:
            print(f"TOKENTOP_CPU_KERNELS={res['mode']}: the {res['body']} kernels\n")
        print("| lever | prompt | decode tok/s | × plain | TTFT | × plain | accept | ppl | output vs plain greedy |")
        print("|---|---|---|---|---|---|---|---|---|")
        for row in res["rows"]:
            if "refused" in row:
                print(f"| {row['lever']} | {row['prompt']} | refused: {row['refused']} | | | | | | |")
                continue
            print(
                f"| {row['lever']} | {row['prompt']} | {fmt.num(statistics.median(row['tok_s']))} | {median_range(row['tok_s_ratio'])} "
                f"| {fmt.ms(statistics.median(row['ttft_s']))} | {median_range(row['ttft_ratio'])} "
                f"| {fmt.pct(row['accept'])} | {fmt.num(row['ppl'], 2)} | {row['diff']} |"
            )
        print()
    if len(results) > 1:  # the ratios side by side, the table to read first
        print("| lever | prompt | " + " | ".join(f"× plain, {r['body']}" for r in results) + " | ppl |")
        print("|---|---|" + "---|" * len(results) + "---|")
        keyed = [{(row["lever"], row["prompt"]): row for row in r["rows"]} for r in results]
        for key in keyed[0]:
            cells = [median_range(k[key]["tok_s_ratio"]) if key in k and "refused" not in k[key] else "refused" for k in keyed]
            ppls = " / ".join(fmt.num(k[key].get("ppl"), 2) for k in keyed if key in k and "refused" not in k[key])
            print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + f" | {ppls} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levers", default=DEFAULT)
    ap.add_argument("--prompt-lengths", default="10,400")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="plain/lever pairs per lever (at least 5 for a median with a range)")
    ap.add_argument("--kernels", default="", help="kernel bodies to measure one after the other (e.g. best,portable); default: this process's")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's figures, for its parent
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args)))
        return 0
    modes = [m.strip() for m in args.kernels.split(",") if m.strip()]
    print_tables([child(args, m) for m in modes] if modes else [measure(args)], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
