"""Where the UI's CPU goes, pane by pane: a recorded session replayed in real time at 160×45 in
Textual's headless driver (everything but the terminal write), with each pane's drawing (ours)
and Textual's styling of its lines (StylesCache) timed apart. The whole-process figure against
the target is observer_overhead.py's; this one says which pane to work on.

    .venv/bin/python benchmarks/terminal/ui_cost.py [RECORDING] [--seconds 30] [--fps 4] [--look dark,present,light]

--look: the looks to measure, one after the other on the same recording (ui/look.py).

Without a recording, one is made first: the real app on the default model for 8 runs, in tmux.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from textual._styles_cache import StylesCache

from benchmarks.common.tmux import TmuxApp, runs_finished
from monitors.record import read_recording
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp
from tui_app.ui.look import Look


def record_session(path: str, runs: int = 8) -> None:
    app = TmuxApp("tt-ui-cost", ["--auto", "--ignore-eos", "--max-new-tokens", "64", "--record", path])
    try:
        app.wait_for(lambda s: runs_finished(s) >= runs, timeout=120 + 30 * runs, poll=0.5)
    finally:
        app.close()


class PaneTimer:
    """Wraps our redraw() and Textual's StylesCache.render_widget to add up process time per pane."""

    def __init__(self, app: TokentopApp):
        self.drawing: collections.Counter[str] = collections.Counter()
        self.styling: collections.Counter[str] = collections.Counter()
        self.panes = {id(w): name for name, w in app.panes.items()} | {id(app.status): "status"}
        self.panes |= {id(d): "big numbers" for d in app.monitor.numbers.digits.values()}
        for name, widget in app.panes.items():
            widget.redraw = self._timed(widget.redraw, name)
        render_widget = StylesCache.render_widget
        timer = self

        def timed_render(cache, widget, crop):
            t = time.process_time()
            try:
                return render_widget(cache, widget, crop)
            finally:
                timer.styling[timer.panes.get(id(widget), "other widgets")] += time.process_time() - t

        StylesCache.render_widget = timed_render

    def _timed(self, redraw, name):
        def timed(*args, **kwargs):
            t = time.process_time()
            try:
                return redraw(*args, **kwargs)
            finally:
                self.drawing[name] += time.process_time() - t

        return timed

    def reset(self) -> None:
        self.drawing.clear()
        self.styling.clear()


LOOKS = {"dark": Look(), "present": Look(present=True), "light": Look(theme="light"), "present-light": Look(theme="light", present=True)}


async def measure(path: str, seconds: float, fps: float, look: str = "dark") -> None:
    app = TokentopApp(ReplaySource(read_recording(path).events, speed=1.0), None, fps=fps, look=LOOKS[look])
    async with app.run_test(size=(160, 45)):
        timer = PaneTimer(app)
        await asyncio.sleep(3)  # past the first layout
        timer.reset()
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(f"replay of {os.path.basename(path)} at 160×45, {fps:g} fps, {wall:.0f} s, headless driver, look {look}\n")
    print("| pane | our drawing, % of a core | Textual styling, % of a core |\n|---|---|---|")
    for name in sorted(set(timer.drawing) | set(timer.styling), key=lambda n: -(timer.drawing[n] + timer.styling[n])):
        print(f"| {name} | {timer.drawing[name] / wall * 100:.2f} | {timer.styling[name] / wall * 100:.2f} |")
    print(f"| **whole process** | {cpu / wall * 100:.1f} | |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recording", nargs="?")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--fps", type=float, default=4.0)
    ap.add_argument("--look", default="dark", help=f"looks, comma-separated: {', '.join(LOOKS)}")
    args = ap.parse_args()
    path = args.recording
    if path is None:
        path = tempfile.mktemp(suffix=".jsonl", prefix="tokentop-ui-cost-")
        record_session(path)
    for look in args.look.split(","):
        asyncio.run(measure(path, args.seconds, args.fps, look))
    return 0


if __name__ == "__main__":
    sys.exit(main())
