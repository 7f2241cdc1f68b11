"""Startup: launch to the first token on screen, read off a real 160×45 tmux terminal.

Cold: an empty model cache (the bundled GGUF is converted). Warm: the converted copy is cached.
Targets: warm ≤ 5 s, cold ≤ 30 s.

    .venv/bin/python benchmarks/engine/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp

# The status bar shows the TTFT once the prefill's token has been drawn.
FIRST_TOKEN = re.compile(r"TTFT \d+ ms")


def launch(cache: str) -> float:
    app = TmuxApp("tt-startup", ["--no-record", "--max-new-tokens", "16"], env={"TOKENTOP_CACHE": cache})
    try:
        return app.wait_for(lambda s: FIRST_TOKEN.search(s) is not None, timeout=180)
    finally:
        app.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cold, warm = [], []
    for _ in range(args.repeats):
        cache = tempfile.mkdtemp(prefix="tokentop-cache-")
        cold.append(launch(cache))
        warm.append(launch(cache))
        shutil.rmtree(cache, ignore_errors=True)
    print(f"launch → first token on screen, {args.repeats} repeats, {os.cpu_count()} cores\n")
    print("| start | median s | min–max s | target |\n|---|---|---|---|")
    print(f"| cold (GGUF converted) | {statistics.median(cold):.1f} | {min(cold):.1f}–{max(cold):.1f} | ≤ 30 |")
    print(f"| warm (cached copy) | {statistics.median(warm):.1f} | {min(warm):.1f}–{max(warm):.1f} | ≤ 5 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
