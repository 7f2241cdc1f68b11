"""The lever ledger's verdicts on this machine: plain and each mix in turns on the default model,
the same prompt and length, then the ledger (tui_app/core/ledger.py) over the session's runs, as
`g` shows it. Run once per CPU kernel path to compare them:

    .venv/bin/python benchmarks/engine/ledger.py [--rounds 3] [--tokens 48] [--mixes int8,int4,compile,int4+compile,spec:lookup,no-cache]
    TOKENTOP_CPU_KERNELS=portable .venv/bin/python benchmarks/engine/ledger.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tui_app.commands.bench import apply_levers
from tui_app.core import ledger
from tui_app.core.session import Session
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import RunRequest

MIXES = {
    "int8": {"quant": "int8"},
    "int4": {"quant": "int4"},
    "compile": {"compile": True},
    "int4+compile": {"quant": "int4", "compile": True},
    "spec:lookup": {"spec": "lookup"},
    "no-cache": {"cache": False},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--preset", default="short")
    ap.add_argument("--mixes", default=",".join(MIXES))
    args = ap.parse_args()
    session = Session()
    engine = Engine(EngineConfig(), session.feed)
    engine.load()
    req = RunRequest(preset=args.preset, max_new_tokens=args.tokens, ignore_eos=True)
    mixes = [{}, *(MIXES[m] for m in args.mixes.split(","))]
    for _ in range(args.rounds):  # in turns: a drift in the machine's pace falls on every mix alike
        for levers in mixes:
            apply_levers(engine, levers)
            engine.run(req)
    kernels = os.environ.get("TOKENTOP_CPU_KERNELS") or "best"
    print(f"{kernels} kernels ({engine.ready.quant_impl}); {args.rounds} rounds of {args.tokens} tokens, {args.preset} prompt")
    for e in ledger.entries(session):
        print("  " + " | ".join(e.row()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
