"""`tokentop probe`: what each GPU probe and the CPU's energy counter read on this machine, each
field with its value, unit and source or n/a with the reason (monitors/probe.py); `--dump DIR`
copies the files read into a folder that `--root DIR` reads back, for a bug report."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from monitors import probe
from tui_app.core.options import EXIT_USAGE, bounded

PARSER = {"help": "what the GPU probes and the CPU's energy counter read here, with units and sources"}
PID = bounded(int, 1, why="a process id")
INTERVAL = bounded(float, 0, 10, why="seconds between the two readings")


@dataclass(kw_only=True)
class Options:
    root: str
    pid: list[int]
    output: str
    dump: str | None
    interval: float


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR", help="read a folder laid out as the system (one --dump wrote) instead of this machine")
    p.add_argument("--pid", type=PID, action="append", default=[], help="a process whose own GPU memory and busy share to read (fdinfo); repeatable")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text", help="json: every field in SI units (B, W, Hz, %%, J, °C)")
    p.add_argument("--dump", default=None, metavar="DIR", help="also copy the files the probes read into DIR, laid out as the system")
    p.add_argument("--interval", type=INTERVAL, default=0.5, help="seconds between the two readings that power and busy shares need")


def main(opts: Options) -> int:
    if not Path(opts.root).is_dir():
        print(f"tokentop: --root {opts.root}: no such folder", file=sys.stderr)
        return EXIT_USAGE
    pids = frozenset(opts.pid)
    if opts.dump:
        out = Path(opts.dump)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            print(f"tokentop: --dump {opts.dump}: {'not empty' if out.is_dir() else 'a file'}; name a new folder", file=sys.stderr)
            return EXIT_USAGE
        try:
            n = probe.dump(opts.root, out, pids)
        except OSError as exc:
            print(f"tokentop: --dump {opts.dump}: cannot write it ({exc.strerror})", file=sys.stderr)
            return EXIT_USAGE
        print(f"tokentop: {n} files the probes read, under {out}; `tokentop probe --root {out}` reads them back", file=sys.stderr)
    report = probe.probe(opts.root, pids, opts.interval)
    print(json.dumps(report, indent=2) if opts.output == "json" else probe.text(report))
    return 0
