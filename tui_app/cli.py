"""Command line: `tokentop` (the TUI), `run --no-tui`, `attach`, `bench`, `replay`, `report`, `demo`, `leakcheck`, `serve`.

Command-line misuse exits 2 with one line that says what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import os
import sys

from monitors.events import BATCH_SIZES, QUANT_LEVELS, SPEC_MODES
from tui_app.commands.options import max_memory
from tui_app.core.options import (
    EXIT_USAGE,
    UsageError,
    bounded,
    default_record_path,
    engine_config,
    make_recorder,
    quiet_libraries,
    require_extra,
    run_request,
)
from tui_app.core.terminal import cannot_draw
from tui_app.engine.config import DEVICE_MAPS
from tui_app.prompts import PRESETS

ENGINE_COMMANDS = ("run", "serve", "bench", "leakcheck", "demo")

COUNT = bounded(int, 1)  # runs, tokens, layers: one or more
_FPS = bounded(float, 1, 60, why="redraws per second")


def FPS(text: str):
    """--fps: a number of redraws per second, or "auto" (4, lowered while the terminal falls behind)."""
    if text == "auto":
        return text
    try:
        return _FPS(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (or auto)") from None


FPS.bounds = _FPS.bounds  # type: ignore[attr-defined]
HZ = bounded(float, 0, 20, lo_open=True, why="samples per second; more would cost the machine what it measures")


def _generation_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("--prompt", default=None, help="prompt text (default: the preset)")
    g.add_argument("--prompt-file", default=None, help="read the prompt from a file")
    g.add_argument("--preset", default=None, choices=PRESETS, help="prompt preset: short, long, story (the one prompt lookup favours) or file")
    g.add_argument("--max-new-tokens", type=COUNT, default=128)
    g.add_argument("--ignore-eos", action="store_true", help="always generate max-new-tokens")
    g.add_argument("--temperature", type=bounded(float, 0), default=0.0, help="0 = greedy (default)")
    g.add_argument(
        "--top-p", type=bounded(float, 0, 1, lo_open=True, why="the share of probability kept"), default=1.0, help="nucleus sampling, (0, 1] (default 1: off)"
    )
    g.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0)


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument(
        "--model", default="default", help="'default' (bundled SmolLM2-135M-Instruct), a Hugging Face id in the local cache, a folder or a .gguf file"
    )
    g.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    g.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    g.add_argument(
        "--device-map",
        default=None,
        choices=DEVICE_MAPS,
        help="place the model's layers over every GPU, then CPU, then disk (accelerate), for a model larger than one GPU",
    )
    g.add_argument("--max-memory", type=max_memory, default=None, metavar="DEV=SIZE,...", help="with --device-map: each device's share, e.g. 0=20GiB,cpu=64GiB")
    g.add_argument("--draft-model", default=None, help="draft model for speculative decoding (default: the target's own first layers)")
    g.add_argument("--draft-layers", type=COUNT, default=4, help="layers of the self-draft (default 4)")
    g.add_argument("--threads", type=bounded(int, 0), default=0, help="torch threads on CPU (default 0: cores - 1, leaving one for the UI)")


def _engine_args(p: argparse.ArgumentParser) -> None:
    _model_args(p)
    _generation_args(p)
    g = p.add_argument_group("prompt handling")
    g.add_argument("--truncate", choices=["none", "left"], default="none", help="left: drop the start of a prompt too long for the context")
    g.add_argument("--no-chat", action="store_true", help="do not wrap the prompt in the model's chat template")
    g = p.add_argument_group("levers (initial state; keys switch them live)")
    g.add_argument("--no-cache", action="store_true", help="start with the KV cache off")
    g.add_argument(
        "--compile", action="store_true", help="start with static cache + a compiled decode step (torch.compile; a quantized Llama on CPU: one C++ op)"
    )
    g.add_argument("--quant", choices=QUANT_LEVELS, default="off")
    g.add_argument("--spec", choices=SPEC_MODES, default="off")
    g.add_argument("--batch", type=int, choices=BATCH_SIZES, default=1)
    g.add_argument("--verbose", action="store_true", help="show the libraries' own warnings and progress bars")
    g.add_argument("--debug-leak-mb", type=bounded(float, 0), default=0.0, help=argparse.SUPPRESS)


def _ui_args(p: argparse.ArgumentParser) -> None:
    # 4 by measurement: at 8 the UI took 30 % of a core on the 2-core machine and slowed decode (README).
    p.add_argument(
        "--fps", type=FPS, default="auto", help="redraws per second, or auto (the default: 4, lower while the terminal cannot keep up, as over a slow link)"
    )
    p.add_argument("--ascii", action="store_true", help="charts, borders and marks in plain ASCII (terminals or fonts without braille or box drawing)")
    p.add_argument("--hz", type=HZ, default=4.0, help="system/GPU samples per second (default 4)")
    p.add_argument("--record", default=None, help="record every event to this JSONL file (default: the user data folder)")
    p.add_argument("--no-record", action="store_true", help="do not record the session")
    p.add_argument("--out-dir", default=None, help="folder for exports (e) and screenshots (ctrl+s) (default: the recordings folder)")
    p.add_argument("--auto", action="store_true", help="start in auto-repeat mode")


def build_parser() -> argparse.ArgumentParser:
    from tui_app import __version__

    p = argparse.ArgumentParser(prog="tokentop", description="Watch an LLM generate, live.")
    p.add_argument("--version", action="version", version=f"tokentop {__version__}")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="the TUI (default), or --no-tui for numbers only")
    _engine_args(run)
    _ui_args(run)
    run.add_argument("--no-tui", action="store_true", help="print each run's numbers instead of drawing the TUI")
    run.add_argument("--runs", type=COUNT, default=1, help="with --no-tui: how many runs")
    serve = sub.add_parser(
        "serve",
        help="serve the TUI to a browser (textual-serve); `serve [options] attach URL ...` serves a server's",
        description="Serve the TUI to a browser: the engine's, or after the word attach a server's (tokentop serve --port 8001 "
        "attach http://127.0.0.1:8000). Whoever opens the page drives the engine (every key, new prompts, "
        "this machine's memory) and tokentop asks no password, so it binds to 127.0.0.1 only. To watch from another "
        "machine, forward the port over SSH there: ssh -L 8000:127.0.0.1:8000 you@this-machine, then open "
        "http://127.0.0.1:8000. --host beyond this machine also needs --public.",
    )
    _engine_args(serve)
    _ui_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only; others need --public)")
    serve.add_argument("--port", type=bounded(int, 1, 65535), default=8000, help="port (default 8000)")
    serve.add_argument("--public", action="store_true", help="allow a --host reachable from other machines: anyone who reaches it drives the engine")
    bench = sub.add_parser("bench", help="sweep levers x prompt lengths x output lengths; tables and files")
    _engine_args(bench)
    from tui_app.commands.bench import add_bench_args

    add_bench_args(bench)
    replay = sub.add_parser("replay", help="the TUI on a recording, no model loaded")
    replay.add_argument("file")
    replay.add_argument("--speed", type=bounded(float, 0), default=1.0, help="1 = real time, N = N times faster, 0 = as fast as possible")
    replay.add_argument("--step", action="store_true", help="advance one step per key press (space)")
    replay.add_argument("--fps", type=FPS, default=8.0, help="redraws per second, or auto (default 8)")
    replay.add_argument("--ascii", action="store_true", help="charts, borders and marks in plain ASCII")
    replay.add_argument("--stats", action="store_true", help="print the per-run statistics instead of drawing the TUI")
    attach = sub.add_parser(
        "attach",
        help="the same panes for a running inference server (vLLM, SGLang, TGI, llama.cpp, Ollama, any OpenAI-compatible API)",
        description="Stream requests through a server's OpenAI-compatible API and show them live, with the server's own "
        "Prometheus /metrics beside them. Without a URL, looks for servers on this host.",
    )
    _attach_args(attach)
    _ui_args(attach)
    report = sub.add_parser("report", help="a recording or a `bench -o json` result as one self-contained HTML page (and PNGs)")
    from tui_app.commands.report import add_report_args

    add_report_args(report)
    demo = sub.add_parser("demo", help="a guided, captioned tour of the levers (the built-in one or a TOML script)")
    _model_args(demo)  # the tour sets the levers and prompts itself: greedy, from plain
    demo.set_defaults(temperature=0.0, top_p=1.0, seed=0, no_cache=False, compile=False, quant="off", spec="off", batch=1, debug_leak_mb=0.0)
    _ui_args(demo)
    from tui_app.commands.demo import add_demo_args

    add_demo_args(demo)
    leak = sub.add_parser("leakcheck", help="repeated runs, the memory baseline trend and a verdict (exit 1 on a suspected leak)")
    _engine_args(leak)
    leak.add_argument("--runs", type=COUNT, default=30)
    leak.set_defaults(max_new_tokens=16)
    return p


def _attach_args(p: argparse.ArgumentParser) -> None:
    from tui_app.attach.client import CONCURRENCY
    from tui_app.attach.otlp import add_otlp_arg

    p.add_argument("url", nargs="*", help="the server's base URL, e.g. http://127.0.0.1:8000 (/v1 is added); up to 4 to compare them (t moves between)")
    g = p.add_argument_group("server")
    g.add_argument("--model", default=None, help="the served model to ask (default: the first of /v1/models)")
    g.add_argument("--metrics", default=None, metavar="URL", help="its Prometheus metrics (default: URL/metrics)")
    g.add_argument("--api-key-env", default=None, metavar="VAR", help="the environment variable holding the API key (default OPENAI_API_KEY when set)")
    g.add_argument("--insecure", action="store_true", help="accept a self-signed TLS certificate")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--chat", dest="chat", action="store_true", default=True, help="/v1/chat/completions (default)")
    mode.add_argument("--completions", dest="chat", action="store_false", help="/v1/completions with the raw prompt")
    g.add_argument("--label", action="append", default=[], help="a server's name in the runs table, once per URL (default host:port)")
    g.add_argument("--concurrency", type=int, choices=CONCURRENCY, default=1, help="parallel streams per run (b switches it live)")
    g.add_argument("--timeout", type=bounded(float, 0, 3600, lo_open=True), default=30.0, help="seconds a stream may stay silent before it counts as stalled")
    g.add_argument(
        "--metrics-hz",
        type=bounded(float, 0, 20, lo_open=True, why="a scrape is a request to the server"),
        default=1.0,
        help="scrapes of /metrics per second (default 1)",
    )
    add_otlp_arg(g)  # attach: x opens the waterfall
    _generation_args(p)
    p.add_argument("--no-tui", action="store_true", help="print each run's numbers instead of drawing the TUI")
    p.add_argument("--runs", type=COUNT, default=1, help="with --no-tui: how many runs")
    p.add_argument("--demo", action="store_true", help="a captioned tour: prompt length, concurrent streams, each server in turn (docs/demo.md)")
    p.set_defaults(truncate="none", no_chat=False)


def _tui(args, source=None, make=None) -> int:
    why = cannot_draw()
    if why:
        own = {"attach": "`tokentop attach URL --no-tui`", "demo": "`tokentop demo --no-tui`"}
        no_tui = own.get(args.command, "`tokentop run --no-tui` (or `tokentop bench`)")
        print(f"tokentop: {why}; for the numbers use {no_tui}", file=sys.stderr)
        return EXIT_USAGE
    from monitors.record import RecordError
    from tui_app.commands.run import live_source

    try:
        recorder = make_recorder(args)
    except RecordError as exc:
        raise UsageError(str(exc)) from None
    # The engine starts loading torch and the model while this process imports Textual.
    source = source or live_source(args)
    if recorder is not None:
        source.number_from(recorder.first_run_id)
    source.start()
    try:
        from tui_app.ui.app import make_app

        app = (make or make_app)(args, source, recorder)
        app.run()
    finally:
        source.close()
        if recorder is not None:
            recorder.close()
    _leave_if_stuck(app.return_code or 0)
    return app.return_code or 0


def _leave_if_stuck(code: int) -> None:
    """Textual's input thread reads the terminal until its driver tells it to stop. A terminal that
    closes while the app is quitting (SIGHUP just after q, an SSH drop) can end the app before
    that, and the thread then spins on the closed terminal, keeping the process alive for good
    (seen: orphans at 30-45 % CPU). By now the engine is stopped and the recording closed."""
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for t in others:
        t.join(timeout=2.0)
    if any(t.is_alive() for t in others):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _demo(args) -> int:
    """The tour, then with --report its recording as a report: checked first, so a tour is never
    given without the report it was asked for."""
    from tui_app.commands.demo import demo_main

    if args.report:
        if args.no_record:
            raise UsageError("--report is made from the tour's recording: leave out --no-record")
        existed = os.path.exists(args.report)
        try:
            with open(args.report, "a"):
                pass
        except OSError as exc:
            raise UsageError(f"--report {args.report}: cannot write it ({exc.strerror or exc})") from None
        if not existed:
            os.remove(args.report)
        args.record = args.record or default_record_path()
    code = demo_main(args, _tui)
    if args.report and os.path.exists(args.record):
        from tui_app.commands.report import ReportError, build, write_html

        try:
            write_html(build(args.record), args.report)
        except ReportError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return code or EXIT_USAGE
        print(f"wrote {args.report}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["run", *argv]
    served = None
    if argv[0] == "serve" and "attach" in argv[1:]:  # serve the attach app: no engine, a base install does
        at = argv.index("attach")
        served = argv[at:]
        parser.parse_args(served)  # its options are checked here, before anything binds
        argv = argv[:at]
    args = parser.parse_args(argv)
    if args.command == "serve":
        args.served, args.argv = served, argv
    if not getattr(args, "verbose", False):
        quiet_libraries()
    from tui_app.folders import FolderError, check_engine_folders

    try:
        if args.command in ENGINE_COMMANDS and not (args.command == "bench" and args.endpoint) and not (args.command == "serve" and args.served):
            require_extra("engine")
        if args.command == "report":
            require_extra("report")
        if args.command in ("run", "serve", "bench", "leakcheck") and not getattr(args, "served", None):
            for note in check_engine_folders():
                print(f"tokentop: {note}", file=sys.stderr)
            cores = os.cpu_count() or 1
            if args.threads > cores:
                print(f"tokentop: warning: --threads {args.threads} is more than this machine's {cores} cores; threads beyond them only wait", file=sys.stderr)
        if args.command == "run":
            run_request(args)  # validate before any model loads
            engine_config(args)
            if args.no_tui:
                from tui_app.commands.run import run_headless

                return run_headless(args)
            return _tui(args)
        if args.command == "serve":
            from tui_app.commands.serve import serve

            return serve(args)
        if args.command == "bench":
            from tui_app.commands.bench import run_bench

            return run_bench(args)
        if args.command == "replay":
            from tui_app.commands.replay import replay_main

            return replay_main(args)
        if args.command == "attach" and args.demo:
            from tui_app.commands.demo import attach_demo

            return attach_demo(args, _tui)
        if args.command == "attach":
            from tui_app.commands.attach import attach_main

            return attach_main(args, _tui)
        if args.command == "report":
            from tui_app.commands.report import report_main

            return report_main(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "leakcheck":
            from tui_app.commands.leakcheck import leakcheck

            return leakcheck(args)
    except (UsageError, FolderError) as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tokentop: interrupted", file=sys.stderr)
        return 130
    parser.print_help()
    return EXIT_USAGE
