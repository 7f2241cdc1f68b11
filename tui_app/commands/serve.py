"""`tokentop serve [attach URL ...]`: the same app in a browser through textual-serve, bound to 127.0.0.1 unless told otherwise.

Whoever opens the page drives the engine, and textual-serve checks no password: an address other
machines can reach needs --public, and the command says who can then connect. The safe way to
watch from elsewhere is an SSH tunnel to the loopback address (the parser's description)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import socket
import sys
from dataclasses import dataclass

from monitors.redact import redact
from tui_app.commands.options import add_engine, add_ui, check_engine
from tui_app.core.options import EXIT_USAGE, EngineOptions, PromptOptions, UiOptions, bounded

PARSER = {
    "help": "serve the TUI to a browser (textual-serve); `serve [options] attach URL ...` serves a server's",
    "description": "Serve the TUI to a browser: the engine's, or after the word attach a server's (tokentop serve --port 8001 "
    "attach http://127.0.0.1:8000). Whoever opens the page drives the engine (every key, new prompts, "
    "this machine's memory) and tokentop asks no password, so it binds to 127.0.0.1 only. To watch from another "
    "machine, forward the port over SSH there: ssh -L 8000:127.0.0.1:8000 you@this-machine, then open "
    "http://127.0.0.1:8000. --host beyond this machine also needs --public.",
}


@dataclass(kw_only=True)
class Options(EngineOptions, PromptOptions, UiOptions):
    host: str
    port: int
    public: bool
    served: list[str] | None  # `attach URL ...`, from the word attach on: the app served is attach's
    argv: list[str]  # the command line up to there, passed on to the app served


def add_args(p: argparse.ArgumentParser) -> None:
    add_engine(p)
    add_ui(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only; others need --public)")
    p.add_argument("--port", type=bounded(int, 1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--public", action="store_true", help="allow a --host reachable from other machines: anyone who reaches it drives the engine")
    p.set_defaults(served=None, argv=[])


def main(opts: Options) -> int:
    if not opts.served:  # serving attach needs no engine here: a base install does
        check_engine(opts.threads)
    return serve(opts)


TUNNEL = "ssh -L {port}:127.0.0.1:{port} you@this-machine, then open http://127.0.0.1:{port}"


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server to this machine (every address it resolves to is loopback)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def who_can_connect(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        import psutil

        addrs = sorted({a.address for nic in psutil.net_if_addrs().values() for a in nic if a.family in (socket.AF_INET, socket.AF_INET6)})
        where = "every address of this machine: " + ", ".join(a.split("%")[0] for a in addrs)
    else:
        where = host
    return (
        f"tokentop: --public: anyone who can reach port {port} on {where} drives the engine "
        "(every key, new prompts, this machine's memory); no password is asked"
    )


def _passthrough(argv: list[str]) -> list[str]:
    """serve's own arguments less the ones that are serve's alone: the rest are the app's."""
    kept: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("serve", "--public"):
            continue
        if a in ("--host", "--port"):
            skip = True
            continue
        if a.startswith(("--host=", "--port=")):
            continue
        kept.append(a)
    return kept


def serve(args: Options) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        print("tokentop: `serve` needs textual-serve (pip install textual-serve)", file=sys.stderr)
        return EXIT_USAGE
    if not is_loopback(args.host):
        if not args.public:
            print(
                f"tokentop: --host {args.host} lets other machines drive the engine with no password; add --public to mean it, "
                f"or keep the default and forward the port: {TUNNEL.format(port=args.port)}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(who_can_connect(args.host, args.port), file=sys.stderr)
    command = shlex.join([sys.executable, "-m", "tui_app", *(args.served or ["run", *_passthrough(args.argv)])])
    # Each browser session runs the app on pipes, with Textual's web driver in place of a terminal:
    # without this the app takes the pipes for "no terminal here" and every page stays blank.
    os.environ["TOKENTOP_FORCE_TUI"] = "1"
    print(f"serving tokentop on http://{args.host}:{args.port} (command: {redact(command)})", file=sys.stderr)
    Server(command, host=args.host, port=args.port, title="tokentop").serve()
    return 0
