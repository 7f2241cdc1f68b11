"""`tokentop listen`: the TUI (or, with --no-tui, a row per call) for the generation of any process
that calls `tokentop.watch(model, tokenizer)`, a notebook's for one (attach/watch.py, attach/listen.py).
It runs until q or Ctrl-C; the processes that send to it come and go."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from tui_app.commands.options import add_ui
from tui_app.core.options import EXIT_USAGE, UiOptions, open_recording
from tui_app.core.session import Session

PARSER = {"help": "show the generation of processes that call tokentop.watch(model) (a notebook's): the TUI, or --no-tui for a row per call"}
NO_TUI = "`tokentop listen --no-tui`"
POLL_S = 0.05
HOW = "in Python: import tokentop; tokentop.watch(model, tokenizer)"


@dataclass(kw_only=True)
class Options(UiOptions):
    no_tui: bool


def add_args(p: argparse.ArgumentParser) -> None:
    add_ui(p)
    p.add_argument("--no-tui", action="store_true", help="a row per generate() call on stdout, until Ctrl-C")


def main(opts: Options) -> int:
    from tui_app.attach.listen import ListenError, ListenSource
    from tui_app.attach.watch import socket_path

    source = ListenSource(socket_path())
    try:
        if not opts.no_tui:
            from tui_app.commands.script import watched_app
            from tui_app.ui.launch import run_tui

            return run_tui(opts, lambda: source, NO_TUI, make_app=watched_app)
        return headless(opts, source)
    except ListenError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE


def headless(opts: Options, source) -> int:
    from tui_app.commands.script import say

    recorder = open_recording(opts)
    session = Session(recorder=recorder)
    source.start()
    print(f"tokentop: listening on {source.path}; {HOW}", file=sys.stderr, flush=True)

    def show() -> None:
        for ev in source.drain():
            session.feed(ev)
            say(session, ev, out=sys.stdout)

    try:
        while True:
            show()
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # how a listener is ended: what came before it is shown too
        show()
        return 0
    finally:
        source.close()
        if recorder is not None:
            recorder.close()
