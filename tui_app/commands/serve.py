"""`tokentop serve [attach URL ...]`: the same app in a browser through textual-serve, bound to 127.0.0.1 unless told otherwise.

Whoever opens the page drives the engine, and textual-serve checks no password: an address other
machines can reach needs --public, and the command says who can then connect. The safe way to
watch from elsewhere is an SSH tunnel to the loopback address (the parser's description)."""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
import sys

from monitors.redact import redact
from tui_app.core.options import EXIT_USAGE

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


def serve(args) -> int:
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
