"""`tokentop -- python my_script.py ARGS`: a user's own script watched, unchanged (attach/script.py).

Without a TUI (`tokentop --no-tui -- …`) the script keeps the terminal: its output is on stdout and
stderr as it would be alone, and tokentop's row for each generate() call goes to stderr, so a
pipe or a redirect of the script's stdout gets the script's output alone. Either way the script's
exit code is tokentop's.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from monitors.events import EngineError, EngineReady, RunFinished
from tui_app.commands.options import add_ui
from tui_app.core.options import EXIT_USAGE, UiOptions, open_recording
from tui_app.core.session import Session

PARSER = {"help": "watch your own script's generate() calls: tokentop [--no-tui] -- python my_script.py ARGS"}
NO_TUI = "`tokentop --no-tui -- python my_script.py`"
POLL_S = 0.05
LOG = "script.log"
UNSEEN = "no generation seen: neither the script nor a Python process it started made a generate() call or forward of a transformers model"


@dataclass(kw_only=True)
class Options(UiOptions):
    no_tui: bool
    script: list  # the command after --


def add_args(p: argparse.ArgumentParser) -> None:
    add_ui(p)
    p.add_argument("--no-tui", action="store_true", help="the script keeps the terminal; a row per generate() call on stderr")
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run, after --")


def main(opts: Options) -> int:
    from tui_app.attach.script import ScriptError

    if opts.script[:1] == ["--"]:
        opts.script = opts.script[1:]
    if not opts.script:
        print("tokentop: nothing to run: give the command after --, for example `tokentop -- python my_script.py`", file=sys.stderr)
        return EXIT_USAGE
    try:
        return headless(opts) if opts.no_tui else tui(opts)
    except ScriptError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return 127


def tui(opts: Options) -> int:
    from tui_app.attach.script import ScriptSource
    from tui_app.folders import cache_root, require
    from tui_app.ui.launch import run_tui

    log = require(cache_root(), "the script's output", "TOKENTOP_CACHE") / LOG
    source = ScriptSource(opts.script, str(log))
    return run_tui(opts, lambda: source, NO_TUI, make_app=watched_app)


def watched_app(opts: UiOptions, source, recorder):
    """The TUI on a source tokentop does not drive: no request of its own, no auto-repeat."""
    from monitors.sampler import Sampler
    from tui_app.ui.app import TokentopApp
    from tui_app.ui.look import look_of

    return TokentopApp(source, None, recorder=recorder, sampler=Sampler(hz=opts.hz or 4.0), fps=opts.fps, auto=False, out_dir=opts.out_dir, look=look_of(opts))


def headless(opts: Options) -> int:
    from tui_app.attach.script import Script

    recorder = open_recording(opts)
    session = Session(recorder=recorder)
    script = None
    try:
        script = Script(opts.script)  # within the try: a command that cannot run still closes the recording
        while True:
            ended = script.finished()
            for ev in script.drain():
                session.feed(ev)
                say(session, ev)
            if ended:
                if session.ready is None:
                    print(f"tokentop: {UNSEEN}", file=sys.stderr)
                return script.wait()
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached the script too: its own handlers run
        if script is None:  # before it started: the CLI's own "interrupted"
            raise
        code = script.stop()
        for ev in script.drain():
            session.feed(ev)
        print("tokentop: interrupted", file=sys.stderr)
        return code or 130
    finally:
        if recorder is not None:
            recorder.close()


def say(session: Session, ev, out=sys.stderr) -> None:
    """What the headless commands print of a watched process's event: the model once, errors, a row a call."""
    from tui_app.commands.run import row_line

    if isinstance(ev, EngineReady):
        print(f"tokentop: watching {ev.model} in {ev.source} ({ev.n_params / 1e6:.0f}M params, {ev.dtype} on {ev.device})", file=sys.stderr, flush=True)
    elif isinstance(ev, EngineError):
        print(f"tokentop: {ev.message.splitlines()[0]}", file=sys.stderr, flush=True)
    elif isinstance(ev, RunFinished):
        for row in session.rows():
            if row.run_id == ev.run_id:
                print(row_line(row), file=out, flush=True)
