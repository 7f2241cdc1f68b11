"""`tokentop replay FILE`: the TUI (or the statistics) of a recorded session, with no model loaded."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from monitors.record import read_recording
from tui_app.commands.options import FPS, add_look
from tui_app.core.options import EXIT_USAGE, bounded
from tui_app.core.session import Session
from tui_app.core.terminal import cannot_draw

PARSER = {"help": "the TUI on a recording, no model loaded"}


@dataclass(kw_only=True)
class Options:
    file: str
    speed: float
    step: bool
    fps: float | str
    ascii: bool
    theme: str = "dark"
    present: bool = False
    stats: bool


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--speed", type=bounded(float, 0), default=1.0, help="1 = real time, N = N times faster, 0 = as fast as possible")
    p.add_argument("--step", action="store_true", help="advance one step per key press (space)")
    p.add_argument("--fps", type=FPS, default=8.0, help="redraws per second, or auto (default 8)")
    p.add_argument("--ascii", action="store_true", help="charts, borders and marks in plain ASCII")
    add_look(p)
    p.add_argument("--stats", action="store_true", help="print the per-run statistics instead of drawing the TUI")


def main(args: Options) -> int:
    rec = read_recording(args.file)
    if rec.error:
        print(f"tokentop: {rec.error}", file=sys.stderr)
        if not rec.events:
            return EXIT_USAGE
    if args.stats:
        from tui_app.commands.run import row_line

        for row in Session.from_events(rec.events).rows():
            print(row_line(row))
        return 0
    why = cannot_draw()
    if why:
        print(f"tokentop: {why}; use `tokentop replay --stats FILE` for the numbers", file=sys.stderr)
        return EXIT_USAGE
    from tui_app.core.sources import ReplaySource
    from tui_app.ui.app import TokentopApp
    from tui_app.ui.launch import leave_if_stuck
    from tui_app.ui.look import look_of

    app = TokentopApp(ReplaySource(rec.events, speed=args.speed, step_mode=args.step, error=rec.error), None, fps=args.fps, look=look_of(args))
    app.run()
    code = app.return_code or 0
    leave_if_stuck(code)  # a terminal closed while it quit (a multiplexer killed, an SSH drop)
    return code
