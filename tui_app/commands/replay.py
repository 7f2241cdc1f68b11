"""`tokentop replay FILE`: the TUI (or the statistics) of a recorded session, with no model loaded."""

from __future__ import annotations

import sys

from monitors.record import read_recording
from tui_app.core.session import HISTORY, Session


def fold(events, history: int = HISTORY) -> Session:
    session = Session(history=history)
    for ev in events:
        session.feed(ev)
    if session.current is not None and session.current.finished is None:  # the app was killed, or the disk filled, mid-run
        session.died[session.current.started.run_id] = "the recording ends mid-run"
    return session


def replay_main(args) -> int:
    from tui_app.core.options import EXIT_USAGE
    from tui_app.core.terminal import cannot_draw

    rec = read_recording(args.file)
    if rec.error:
        print(f"tokentop: {rec.error}", file=sys.stderr)
        if not rec.events:
            return EXIT_USAGE
    if args.stats:
        from tui_app.commands.run import row_line

        for row in fold(rec.events).rows():
            print(row_line(row))
        return 0
    why = cannot_draw()
    if why:
        print(f"tokentop: {why}; use `tokentop replay --stats FILE` for the numbers", file=sys.stderr)
        return EXIT_USAGE
    from tui_app.core.sources import ReplaySource
    from tui_app.ui.app import TokentopApp

    app = TokentopApp(ReplaySource(rec.events, speed=args.speed, step_mode=args.step, error=rec.error), None, fps=args.fps, ascii=args.ascii)
    app.run()
    return 0
