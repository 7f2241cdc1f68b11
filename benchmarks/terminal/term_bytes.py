"""Bytes a TUI writes to its terminal per second, from the terminal's own stream: the real app in a
real terminal (tmux, a server of its own), `tmux pipe-pane` copying every byte the app writes,
while generating with auto-repeat; btop and htop in the same run, between tokentop's rounds, so
that drift on the machine hits them alike.

    .venv/bin/python benchmarks/terminal/term_bytes.py [--seconds 20] [--rounds 2] [--sizes 160x45,80x24]
        [--checkout DIR]...   # another checkout's tokentop too (main's, for before/after), same venv
        [--replay FILE --speed N]   # a recording instead of the live engine: the same events every time
        [--profile]           # where tokentop's bytes go: by pane, and colour codes / cursor moves / text

Targets at the default 4 fps, every pane live: ≤ 20,000 B/s at 160×45, ≤ 8,000 B/s at 80×24.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import ROOT

TARGETS = {(160, 45): 20_000, (80, 24): 8_000}
STARTED = re.compile(r"TTFT \d+ ms")  # tokentop: the first run's first token is on screen
SEQ = re.compile(r"\x1b\[([0-9;?<>=]*)([A-Za-z@])|\x1b[^\[]|([^\x1b]+)", re.S)


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=check).stdout


class Pane:
    """A program in a tmux window of its own size, its output copied to a file while measured."""

    def __init__(self, name: str, command: str, width: int, height: int):
        self.name = name
        tmux("kill-session", "-t", name, check=False)
        tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), f"{command}; sleep 600")

    def screen(self) -> str:
        return tmux("capture-pane", "-t", self.name, "-p")

    def wait_for(self, pattern: re.Pattern, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pattern.search(self.screen()):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{self.name}: {pattern.pattern!r} not on screen in {timeout} s:\n{self.screen()}")

    def measure(self, seconds: float, out: Path) -> float:
        """Bytes per second written to the terminal over `seconds`."""
        out.unlink(missing_ok=True)
        tmux("pipe-pane", "-o", "-t", self.name, f"cat >> {shlex.quote(str(out))}")
        t0 = time.monotonic()
        time.sleep(seconds)
        tmux("pipe-pane", "-t", self.name)
        elapsed = time.monotonic() - t0
        time.sleep(0.2)  # the copy's last bytes
        return out.stat().st_size / elapsed if out.exists() else 0.0

    def close(self) -> None:
        tmux("kill-session", "-t", self.name, check=False)


def tokentop_command(checkout: str, extra: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k.startswith("TOKENTOP_")}
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd {shlex.quote(checkout)} && {envs} {shlex.join([sys.executable, '-m', 'tui_app', *extra])}"


def profile(stream: bytes, screen: str) -> dict:
    """Where the bytes went: colour codes, cursor moves, text; and by pane, placed by the cursor
    moves that start each update and the panes' borders on the final screen."""
    data = stream.decode("utf-8", "replace")
    lines = screen.splitlines()
    boxes = []  # (name, top, left, bottom, right)
    for y, line in enumerate(lines):
        for m in re.finditer(r"╭─ ([^─╮]+?) ─", line):
            x = m.start()
            right = line.find("╮", x)
            bottom = next((yy for yy in range(y + 1, len(lines)) if len(lines[yy]) > x and lines[yy][x] == "╰"), len(lines) - 1)
            boxes.append((m.group(1).split(" —")[0].split(" ·")[0].strip(), y, x, bottom, right))

    def owner(y: int, x: int) -> str:
        if y == 0:
            return "status line"
        if y == len(lines) - 1:
            return "key bar"
        for name, top, left, bottom, right in boxes:
            if top <= y <= bottom and left <= x <= right:
                return name
        return "other"

    kinds: Counter = Counter()
    panes: Counter = Counter()
    where = "other"
    for m in SEQ.finditer(data):
        n = len(m.group(0).encode())
        if m.group(2) == "H":
            parts = (m.group(1) or "1;1").split(";")
            where = owner(int(parts[0] or 1) - 1, int(parts[1] if len(parts) > 1 else 1) - 1)
            kinds["cursor moves"] += n
        elif m.group(2) == "m":
            kinds["colour codes"] += n
            panes[where] += n
        elif m.group(3) is not None:
            kinds["text"] += n
            panes[where] += n
        else:
            kinds["other codes"] += n
    return {"kinds": kinds, "panes": panes}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="measured per round, after the first token")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sizes", default="160x45,80x24")
    ap.add_argument("--checkout", action="append", default=[], help="another checkout whose tokentop is measured too (run with this venv)")
    ap.add_argument("--replay", default=None, help="a recording to replay (at --speed) instead of generating live")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    sizes = [tuple(map(int, s.split("x"))) for s in args.sizes.split(",")]
    os.environ["TMUX_TMPDIR"] = tempfile.mkdtemp(prefix="tt-bytes-")  # a tmux server of its own
    out = Path(tempfile.mkdtemp(prefix="tokentop-bytes-"))
    apps = [("tokentop", ROOT)] + [(f"tokentop ({Path(c).name})", os.path.abspath(c)) for c in args.checkout]
    run = ["replay", args.replay, "--speed", str(args.speed), "--fps", "4"] if args.replay else ["--no-record", "--auto"]
    others = [("btop (2 s)", "btop"), ("htop (2 Hz)", "htop -d 5")]
    results: dict[tuple, list[float]] = {}
    profiles: dict[tuple, dict] = {}
    for r in range(args.rounds):
        for w, h in sizes:
            for label, checkout in apps:
                pane = Pane("tt-bytes", tokentop_command(checkout, run), w, h)
                try:
                    pane.wait_for(STARTED, timeout=300)
                    time.sleep(2)
                    rate = pane.measure(args.seconds, out / "stream")
                    results.setdefault((label, w, h), []).append(rate)
                    if args.profile and r == 0:
                        profiles[(label, w, h)] = profile((out / "stream").read_bytes(), pane.screen())
                finally:
                    pane.close()
            for label, command in others:
                if shutil.which(command.split()[0]) is None:
                    continue
                pane = Pane("tt-bytes", f"LANG=C.UTF-8 {command}", w, h)
                try:
                    time.sleep(3)  # past its first full screen
                    results.setdefault((label, w, h), []).append(pane.measure(args.seconds, out / "stream"))
                finally:
                    pane.close()
    source = f"replaying {args.replay} at {args.speed}×" if args.replay else "generating live with auto-repeat"
    print(f"bytes written to the terminal, {args.rounds} rounds of {args.seconds:.0f} s, {source}, {os.cpu_count()} cores\n")
    print("| app | size | bytes/s (median) | rounds | target |\n|---|---|---|---|---|")
    for (label, w, h), rates in results.items():
        target = f"≤ {TARGETS[(w, h)]:,}" if label.startswith("tokentop") and (w, h) in TARGETS else "–"
        print(f"| {label} | {w}×{h} | **{statistics.median(rates):,.0f}** | {', '.join(f'{x:,.0f}' for x in rates)} | {target} |")
    for (label, w, h), p in profiles.items():
        total = sum(p["kinds"].values()) or 1
        print(f"\n{label} at {w}×{h}, where the bytes go (first round):")
        print("  " + ", ".join(f"{k} {v / total:.0%}" for k, v in p["kinds"].most_common()))
        print("  " + ", ".join(f"{k} {v / total:.0%}" for k, v in p["panes"].most_common()))
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
