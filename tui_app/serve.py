"""`tokentop serve`: the same app in a browser through textual-serve, bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import os
import shlex
import sys


def serve(args) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        print("tokentop: `serve` needs textual-serve (pip install textual-serve)", file=sys.stderr)
        return 2
    argv = sys.argv[1:]
    passthrough: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "serve":
            continue
        if a in ("--host", "--port"):
            skip = True
            continue
        if a.startswith(("--host=", "--port=")):
            continue
        passthrough.append(a)
    command = shlex.join([sys.executable, "-m", "tui_app", "run", *passthrough])
    # Each browser session runs the app on pipes, with Textual's web driver in place of a terminal:
    # without this the app takes the pipes for "no terminal here" and every page stays blank.
    os.environ["TOKENTOP_FORCE_TUI"] = "1"
    print(f"serving tokentop on http://{args.host}:{args.port} (command: {command})", file=sys.stderr)
    Server(command, host=args.host, port=args.port, title="tokentop").serve()
    return 0
