"""The TUI in this terminal, for a command: its recording opened, its source started (the engine
loads torch and the model while this process imports Textual), the app run, and everything closed
however it ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from tui_app.core.options import EXIT_USAGE, open_recording
from tui_app.core.terminal import cannot_draw


def run_tui(opts, make_source: Callable, no_tui: str, make_app: Callable | None = None) -> int:
    """`make_source()`: the app's event source, made once the recording is open; `no_tui`: the
    command that gives the numbers without a terminal; `make_app(opts, source, recorder)`: an app
    of another kind (the demo's)."""
    why = cannot_draw()
    if why:
        print(f"tokentop: {why}; for the numbers use {no_tui}", file=sys.stderr)
        return EXIT_USAGE
    recorder = open_recording(opts)
    source = make_source()
    if recorder is not None:  # appending to an earlier recording, runs are numbered on from its last
        source.number_from(recorder.first_run_id)
    source.start()
    try:
        app = (make_app or _app)(opts, source, recorder)
        app.run()
    finally:
        source.close()
        if recorder is not None:
            recorder.close()
    code = app.return_code or getattr(source, "exit_code", None) or 0  # a watched script's exit code is tokentop's
    leave_if_stuck(code)
    return code


def _app(opts, source, recorder):
    """The app for a command's options (the entry point; `serve` runs the same command)."""
    from monitors.sampler import Sampler
    from tui_app.core.options import run_request
    from tui_app.ui.app import TokentopApp
    from tui_app.ui.look import look_of

    watch = getattr(opts, "watch", False)  # attach --watch: no request of tokentop's own
    return TokentopApp(
        source,
        None if watch else run_request(opts),
        recorder=recorder,
        sampler=Sampler(hz=opts.hz or 4.0),
        fps=opts.fps,
        auto=opts.auto,
        prompt_file=opts.prompt_file,
        out_dir=opts.out_dir,
        look=look_of(opts),
        profile_steps=getattr(opts, "profile_steps", None),
    )


def leave_if_stuck(code: int) -> None:
    """Textual's input thread reads the terminal until its driver tells it to stop. A terminal that
    closes while the app is quitting (SIGHUP just after q, an SSH drop) can end the app before
    that, and the thread then spins on the closed terminal, keeping the process alive for good at
    30-45 % of a core. By now the engine is stopped and the recording closed."""
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for t in others:
        t.join(timeout=2.0)
    if any(t.is_alive() for t in others):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
