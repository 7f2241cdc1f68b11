"""Launch to the first frame with data, attached to a server: `tokentop attach URL` in a real
160×45 tmux terminal against the real llama.cpp server, cold import counted (a new interpreter
each launch; the first launch after the OS's file cache was dropped, where root may drop it).

"With data": the status line names the server's engine and the server pane shows a figure read
from its /metrics, named by its metric. Target ≤ 1 s. `--python` runs another install (the light
base install's venv, say); `--importtime` also prints where the UI process's imports spend it.

    .venv/bin/python benchmarks/serving/attach_launch.py [--repeats 5] [--python /path/to/venv/bin/python] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.tmux import TmuxApp
from tests.helpers.llama_server import LlamaServer


def with_data(screen: str) -> bool:
    status = screen.splitlines()[0] if screen else ""
    return "llama.cpp" in status and "llamacpp:requests_processing" in screen


def launch(url: str, python: str) -> tuple[float, float]:
    """Seconds to the first frame drawn at all, and to the first with the server's data."""
    app = TmuxApp("tt-attach-launch", ["attach", url, "--no-record"], python=python)
    try:
        first = app.wait_for(lambda s: s.strip() != "", timeout=30, poll=0.005)
        data = app.wait_for(with_data, timeout=30, poll=0.005)
        return first, data
    finally:
        app.close()


def drop_file_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


# What the UI process of `attach` imports before its first frame (Textual writes the screen to
# standard error, so -X importtime cannot be read off the real launch): the same modules, alone.
UI_IMPORTS = "import tui_app.cli, tui_app.ui.app, tui_app.commands.attach"


def import_report(python: str, top: int = 12) -> str:
    """All imports' time, and the modules that cost most themselves, from -X importtime's lines (µs)."""
    out = subprocess.run([python, "-X", "importtime", "-c", UI_IMPORTS], capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True).stderr
    rows = []
    for line in out.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            self_us, _, name = line[len("import time:") :].split("|", 2)
            rows.append((int(self_us), name.strip()))
    lines = [f"the UI process's imports ({UI_IMPORTS}): {sum(us for us, _ in rows) / 1e3:.0f} ms in all; the costliest by their own time:"]
    lines += [f"  {us / 1e3:7.1f} ms  {name}" for us, name in sorted(rows, reverse=True)[:top]]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the install to launch (default: this one)")
    ap.add_argument("--importtime", action="store_true")
    args = ap.parse_args()
    server = LlamaServer()
    try:
        dropped = drop_file_cache()
        cold = launch(server.url, args.python)
        warm = [launch(server.url, args.python) for _ in range(args.repeats)]
        print(f"attach launch → first frame / first frame with the server's data, 160×45 tmux, {os.cpu_count()} cores, python {args.python}\n")
        print("| launch | first frame s | with data s | target |\n|---|---|---|---|")
        label = "first, OS file cache dropped" if dropped else "first (file cache not dropped: not root)"
        print(f"| {label} | {cold[0]:.2f} | {cold[1]:.2f} | ≤ 1 |")
        firsts, datas = [w[0] for w in warm], [w[1] for w in warm]
        print(
            f"| next {args.repeats}, median (min–max) | {statistics.median(firsts):.2f} ({min(firsts):.2f}–{max(firsts):.2f}) "
            f"| {statistics.median(datas):.2f} ({min(datas):.2f}–{max(datas):.2f}) | ≤ 1 |"
        )
        if args.importtime:
            print("\n" + import_report(args.python))
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
