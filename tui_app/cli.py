"""Command line: `tokentop` (the TUI), `run --no-tui`, `attach`, `bench`, `replay`, `report`, `demo`, `leakcheck`, `serve`,
and `tokentop -- python my_script.py` (`script`: the user's own script watched), `listen` (a notebook's, through `tokentop.watch`).

A dispatch table: each subcommand is a module of tui_app/commands with its parser (`add_args`, from
the shared option groups in commands/options.py), its typed `Options` and its `main`; the CLI
parses, hands the command its options, and turns misuse into one line and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tui_app import stacks
from tui_app.core.options import EXIT_USAGE, UsageError, from_namespace, quiet_libraries

# The default command's options are run's: without this a user met --present in the README and
# nowhere in `tokentop --help`.
DEFAULT_COMMAND = """Without a command, tokentop is `tokentop run`: the default model in the TUI. Its options
(--model, --present, --theme, --ascii, --device, --max-new-tokens, --no-tui and the rest):
  tokentop run --help
A script of yours watched: tokentop [run options] -- python my_script.py (tokentop script --help).
A command's own options: tokentop COMMAND --help."""

COMMANDS = ("run", "serve", "bench", "replay", "attach", "report", "demo", "leakcheck", "script", "listen", "probe")


def command(name: str):
    return importlib.import_module(f"tui_app.commands.{name}")


def build_parser(names: tuple[str, ...] = COMMANDS) -> argparse.ArgumentParser:
    """The command line's parser with the subcommands `names`: each is a module import (all of them
    half a second of CPU, the fleet's HTTP clients most of it), which a command line naming its
    command need not pay for the others."""
    from tui_app import __version__

    p = argparse.ArgumentParser(
        prog="tokentop",
        usage="tokentop [run options] [-- python SCRIPT ...] | tokentop COMMAND [options]",
        description="Watch an LLM generate, live.",
        epilog=DEFAULT_COMMAND,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"tokentop {__version__}")
    sub = p.add_subparsers(dest="command")
    for name in names:
        module = command(name)
        module.add_args(sub.add_parser(name, **module.PARSER))
    return p


def serving_bench_parser() -> argparse.ArgumentParser:
    """`tokentop bench --endpoint URL ...`: the serving benchmark's own parser, so each bench's --help shows only its options."""
    module = command("serving")
    p = argparse.ArgumentParser(**module.PARSER)
    module.add_args(p)
    return p


def parse(argv: list[str]):
    """(the command's module, its options) for a command line; argparse exits 2 on misuse."""
    if argv[0] == "bench" and any(a == "--endpoint" or a.startswith("--endpoint=") for a in argv[1:]):
        module = command("serving")
        return module, from_namespace(module.Options, serving_bench_parser().parse_args(argv[1:]))
    # Serve's command line may end in attach's, which this parser checks too
    parser = build_parser((argv[0], "attach") if argv[0] == "serve" else (argv[0],)) if argv[0] in COMMANDS else build_parser()
    served = None
    if argv[0] == "serve" and "attach" in argv[1:]:  # serve the attach app: no engine, a base install does
        at = argv.index("attach")
        served = argv[at:]
        parser.parse_args(served)  # its options are checked here, before anything binds
        argv = argv[:at]
    namespace = parser.parse_args(argv)
    if namespace.command is None:
        parser.print_help()
        return None, None
    if namespace.command == "serve":
        namespace.served, namespace.argv = served, argv
    module = command(namespace.command)
    return module, from_namespace(module.Options, namespace)


def normalized(argv: list[str]) -> list[str]:
    """A command line with its subcommand named: `tokentop [options] -- CMD` watches a script, and
    `tokentop [options]` is `run`."""
    if "--" in argv and argv[0] not in COMMANDS:  # tokentop [options] -- python my_script.py: the script watched
        return ["script", *argv]
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        return ["run", *argv]
    return argv


def main(argv: list[str] | None = None) -> int:
    stacks.on_request()
    module, opts = parse(normalized(sys.argv[1:] if argv is None else argv))
    if module is None:
        return EXIT_USAGE
    if not getattr(opts, "verbose", False):
        quiet_libraries()
    from tui_app.folders import FolderError

    try:
        return module.main(opts)
    except (UsageError, FolderError) as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tokentop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped early (`tokentop probe -o json | head`): no traceback, now or at exit's flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
