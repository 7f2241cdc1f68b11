"""What watching a script costs it: the test scripts (tests/attach/scripts/) on the default model's
weights, alone and under `tokentop --no-tui --no-record --`, in alternation, each round the same
script both ways. The figure is the script's own: its median time from token to token (its
streamer's or its loop's stamps), as tok/s, watched over alone; the loop without a cache is the
one whose every forward the hook compares with the one before. Then what a Python process the
script starts pays at its start for being in a watched tree (`python -c pass`, with tokentop's
sitecustomize and socket name as every such process gets them, against without), and a process
that imports transformers (when the hook loads).

    .venv/bin/python benchmarks/serving/script_overhead.py [--rounds 4] [--calls 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import ROOT
from tui_app.attach.script import CHILD, SOCKET_ENV
from tui_app.engine.models import converted_default

# Each script's arguments after the model's folder, for `calls` generations of 24 forwards.
SCRIPTS = {
    "pipeline": lambda calls: ["pipeline_script.py", str(calls)],
    "loop": lambda calls: ["greedy_loop.py", str(calls)],
    "loop without a cache": lambda calls: ["whole_context_loop.py", ",".join(["argmax"] * calls), "24"],
}


def itl_ms(script: list[str], folder: str, watched: bool) -> list[float]:
    """The script's own ITL medians, one a call (the first call's warm-up left out)."""
    cmd = [sys.executable, os.path.join(ROOT, "tests", "attach", "scripts", script[0]), folder, *script[1:]]
    if watched:
        cmd = [sys.executable, "-m", "tui_app", "--no-tui", "--no-record", "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True, timeout=600).stdout
    return [float(x) for x in re.findall(r"^ITL_MS ([\d.]+)$", out, re.M)][1:]


def start_ms(code: str, hooked: bool, times: int) -> float:
    """The median wall time of `python -c CODE` in a watched tree's environment, or without."""
    env = dict(os.environ)
    if hooked:  # no listener at the socket's name: the start is what is timed
        env |= {"PYTHONPATH": str(CHILD), SOCKET_ENV: os.path.join(ROOT, "no-listener.sock")}
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
        took.append((time.perf_counter() - t0) * 1000)
    return statistics.median(took)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    folder = str(converted_default())
    print("| script | alone tok/s | watched tok/s | watched / alone |\n|---|---:|---:|---:|")
    for name, script in SCRIPTS.items():
        alone, watched = [], []
        for _ in range(args.rounds):
            alone += itl_ms(script(args.calls), folder, False)
            watched += itl_ms(script(args.calls), folder, True)
        a, w = 1000 / statistics.median(alone), 1000 / statistics.median(watched)
        print(f"| {name} | {a:.2f} | {w:.2f} | {w / a:.3f} |", flush=True)
    print("\n| a process of the script's that runs | alone ms | in a watched tree ms |\n|---|---:|---:|")
    for code, times in (("pass", 21), ("import transformers", 5)):
        start_ms(code, False, 2)  # the file cache warmed
        print(f"| `{code}` | {start_ms(code, False, times):.1f} | {start_ms(code, True, times):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
