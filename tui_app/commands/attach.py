"""`tokentop attach [URL ...]`: the servers' client configurations from the arguments, then the
TUI or (--no-tui) each run's numbers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass, replace

from monitors.events import EngineError, RunFinished, ServerSample
from tui_app.commands.fleet import FleetOptions, add_fleet_args
from tui_app.commands.options import COUNT, add_generation, add_ui
from tui_app.core import fmt, readings
from tui_app.core.fmt import figure_text
from tui_app.core.options import EXIT_USAGE, PromptOptions, SamplingOptions, UiOptions, UsageError, bounded, open_recording, run_request
from tui_app.core.tour import server_tour

PARSER = {
    "help": "the same panes for a running inference server (vLLM, SGLang, TGI, llama.cpp, Ollama, any OpenAI-compatible API)",
    "description": "Stream requests through a server's OpenAI-compatible API and show them live, with the server's own "
    "Prometheus /metrics beside them. Without a URL, looks for servers on this host.",
}
NO_TUI = "`tokentop attach URL --no-tui`"


@dataclass(kw_only=True)
class Options(PromptOptions, SamplingOptions, UiOptions, FleetOptions):
    url: list[str]
    model: str | None  # the served model to ask
    metrics: str | None
    api_key_env: str | None
    insecure: bool
    chat: bool
    label: list[str]
    concurrency: int
    timeout: float
    metrics_hz: float
    no_tui: bool
    runs: int
    demo: bool
    otlp: str | None  # HOST:PORT of the OTLP receiver for the servers' spans (x opens the waterfall)
    expert_dir: str | None  # an SGLang or lmdeploy server's recorder folder: its expert load each run


def add_args(p: argparse.ArgumentParser) -> None:
    from tui_app.attach.client import CONCURRENCY

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
    g.add_argument(
        "--expert-dir",
        default=None,
        metavar="DIR",
        help="an SGLang server's SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR or lmdeploy's LMDEPLOY_EXPERT_DUMP_DIR, seen from here: its expert load a run (E)",
    )
    from tui_app.attach.otlp import add_otlp_arg

    add_otlp_arg(g)  # attach: x opens the waterfall
    add_generation(p)
    p.add_argument("--no-tui", action="store_true", help="print each run's numbers instead of drawing the TUI")
    p.add_argument("--runs", type=COUNT, default=1, help="with --no-tui: how many runs")
    p.add_argument("--demo", action="store_true", help="a captioned tour: prompt length, concurrent streams, each server in turn (docs/demo.md)")
    add_fleet_args(p)
    add_ui(p)
    p.set_defaults(truncate="none", no_chat=False)


def main(opts: Options) -> int:
    return attach_demo(opts) if opts.demo else attach_main(opts)


def choose_urls(args: Options) -> list[str]:
    """The URLs given, or the one server found on this host; UsageError lists what was tried or found."""
    if args.url:
        return args.url
    from tui_app.attach.discover import find_servers

    found, tried = find_servers()
    if not found:
        ports = ", ".join(u.rsplit(":", 1)[1] for u in tried)
        raise UsageError(f"no OpenAI-compatible server answers /v1/models on this host (tried ports {ports}); give its URL: tokentop attach http://HOST:PORT")
    if len(found) > 1:
        listing = "; ".join(f"{url} ({', '.join(ids)})" for url, ids in found)
        raise UsageError(f"several servers answer here: {listing}; choose one (or up to 4 to compare): tokentop attach URL [URL ...]")
    url, ids = found[0]
    print(f"tokentop: attaching to {url} ({', '.join(ids)})", file=sys.stderr)
    return [url]


def attach_configs(args: Options, urls: list[str]) -> list:
    """One client configuration per server URL (several: to compare them)."""
    from tui_app.attach.client import AttachConfig
    from tui_app.attach.errors import AttachError, api_base

    if len(urls) > 4:
        raise UsageError(f"attach compares up to 4 servers; {len(urls)} URLs were given")
    if args.label and len(args.label) != len(urls):
        raise UsageError(f"--label: give one per URL ({len(urls)}), or none for host:port")
    key_env = args.api_key_env
    if key_env is None and os.environ.get("OPENAI_API_KEY"):
        key_env = "OPENAI_API_KEY"
    elif key_env is not None and not os.environ.get(key_env):
        raise UsageError(f"--api-key-env {key_env}: that environment variable is not set")
    for url in urls:
        try:
            api_base(url)
        except AttachError as exc:
            raise UsageError(str(exc)) from None
    base = AttachConfig(
        url=urls[0],
        model=args.model,
        metrics_url=args.metrics,
        api_key_env=key_env,
        insecure=args.insecure,
        chat=args.chat,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        metrics_hz=args.metrics_hz,
        watch=args.watch,
        expert_dir=args.expert_dir,
    )
    if args.expert_dir and not os.path.isdir(args.expert_dir):
        raise UsageError(f"--expert-dir {args.expert_dir}: no such folder here (the server's recorder folder, as this host sees it)")
    if len(urls) > 1 and args.metrics:
        raise UsageError("--metrics names one server's metrics; with several URLs each is read at URL/metrics")
    otlp = otlp_address(args)
    return [replace(base, url=url, label=args.label[i] if args.label else "", otlp=otlp) for i, url in enumerate(urls)]


def otlp_address(args) -> str | None:
    """--otlp's HOST:PORT once checked free here (UsageError, one line, where it is not), with the
    server flags that send spans to it said on stderr; None without --otlp."""
    from tui_app.attach import otlp

    try:
        return otlp.checked_address(args)
    except (otlp.ReceiverError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def attach_main(args: Options) -> int:
    if args.prometheus:
        return fleet_main(args)
    request = run_request(args)
    configs = attach_configs(args, choose_urls(args))
    if args.no_tui:
        return asyncio.run(_headless(args, configs, request))
    from tui_app.ui.launch import run_tui

    source = attach_source(configs)
    return run_tui(args, lambda: source, NO_TUI)


def attach_source(configs):
    """The TUI's source for these servers: their client in a process of its own, logging to the cache folder."""
    from tui_app.core.sources import AttachSource
    from tui_app.folders import cache_root

    log_dir = cache_root()
    log_dir.mkdir(parents=True, exist_ok=True)
    return AttachSource(configs, str(log_dir / "attach.log"))


def server_line(fin: RunFinished, sample: ServerSample | None) -> str:
    """What the server itself says about the run and about its load, each with its source."""
    parts = []
    d = fin.server or {}
    if d.get("prompt_ms") is not None:
        parts.append(f"prompt {d['prompt_ms']:.1f} ms, {d.get('predicted_per_token_ms') or float('nan'):.2f} ms/token (server timings)")
    parts.append(f"tokens from {d.get('tokens_from', '?')}")
    if d.get("cached_tokens"):
        parts.append(f"{d['cached_tokens']} prompt tokens cached")
    if sample is not None:
        shown = [f"{figure_text(k, v)} [{sample.sources.get(k, '?')}]" for k, v in sample.values.items() if v is not None]
        parts.extend(shown)
    return "  server: " + "; ".join(parts)


async def xray_lines(session, run_id: int, joiner) -> None:
    """Each stream's X-ray, with --otlp once its span is in: the server's phases with their
    sources and the client's time outside them."""
    from tui_app.attach.joiner import settled

    reqs = session.xray.requests(run_id)
    await settled(reqs, joiner)
    for r in reqs:
        s = r.server
        if s is None or not s.phases:
            if r.note:
                print(f"  x-ray {r.segment}: {r.note}", flush=True)
            continue
        phases = ", ".join(f"{k} {fmt.ms(s.phases[k], 1)} [{s.sources[k]}]" for k in ("queue", "prefill", "decode", "ttft", "e2e") if k in s.phases)
        outside = f"outside the server: TTFT {fmt.ms(r.overhead_ttft_s, 1)}, e2e {fmt.ms(r.overhead_e2e_s, 1)}"
        print(f"  x-ray {r.segment} (trace {r.trace_id}): {phases}; {outside}", flush=True)


@contextlib.asynccontextmanager
async def connected(args, configs):
    """(servers, session) for a headless command: the servers connected and said, their metrics
    scraped, every event into a recording Session; all closed however the command ends.
    UsageError where the recording or a server cannot be had."""
    from tui_app.attach.errors import AttachError
    from tui_app.attach.loop import Servers
    from tui_app.core.session import Session

    recorder = open_recording(args)
    session = Session(recorder=recorder)

    def tell(ev) -> None:
        if isinstance(ev, EngineError) or (isinstance(ev, ServerSample) and ev.error):
            print(f"tokentop: {ev.message if isinstance(ev, EngineError) else ev.error}", file=sys.stderr, flush=True)

    session.listeners.append(tell)
    if recorder is not None:  # appending to an earlier recording, runs are numbered on from its last
        configs = [replace(c, first_run_id=recorder.first_run_id) for c in configs]
    servers = Servers(configs, session.feed)
    metrics = []
    try:
        try:
            await servers.connect()
        except AttachError as exc:
            raise UsageError(str(exc)) from None
        for c in servers.clients:
            where = f"pid {c.pid}" if c.pid else "not on this host"
            said = f"{c.engine.name} server at {c.shown_root} ({where}) as {c.levers.server!r}: model {c.model}, metrics {c.shown_metrics}"
            print(said, file=sys.stderr if args.output == "json" else sys.stdout, flush=True)
        metrics = [asyncio.create_task(c.metrics_loop()) for c in servers.clients]
        await asyncio.sleep(0)
        yield servers, session
    finally:
        for task in metrics:
            task.cancel()
        await asyncio.gather(*metrics, return_exceptions=True)
        await servers.aclose()
        if recorder is not None:
            recorder.close()
            if recorder.kept and recorder.stopped is None:
                print(f"recorded to {recorder.path}", file=sys.stderr)


async def _headless(args, configs, request) -> int:
    from tui_app.commands.run import row_line
    from tui_app.core.export import run_json

    async with connected(args, configs) as (servers, session):
        if args.watch:
            return await _watch_headless(args, servers)
        failed = False
        for _ in range(args.runs):
            for i, c in enumerate(servers.clients):  # ABAB…: the servers take turns on the same requests
                if len(servers.clients) > 1:
                    servers.set_lever("server", c.levers.server)
                fin = await servers.run(request)
                if fin is None:
                    return EXIT_USAGE
                await c.sample()
                latest = next((x for x in reversed(session.server) if x.server == c.levers.server and not x.error), None)
                if args.output == "json":  # stdout: one JSON object a run, nothing else
                    print(run_json(session, fin.run_id), flush=True)
                else:
                    if args.runs == 1 and i == 0:
                        print(fin.text.strip(), flush=True)
                    for row in session.rows():
                        if row.run_id == fin.run_id:
                            print(row_line(row), flush=True)
                    print(server_line(fin, latest), flush=True)
                    await xray_lines(session, fin.run_id, c.tracing.joiner)
                failed = failed or fin.stop_reason == "error"
                session.trim()
        human = sys.stderr if args.output == "json" else sys.stdout
        for line in readings.comparison(session):
            print(line, file=human)
        if session.verdict and args.runs > 1 and len(servers.clients) == 1:
            print(session.verdict.text().replace("leak:", "server leak:"), file=human)
        stopped = session.recorder is not None and session.recorder.stopped is not None  # asked to record, it could not record every run
        return 1 if failed or stopped else 0


async def _watch_headless(args: Options, servers) -> int:
    """`attach URL --watch --no-tui`: the server's own figures each --every (or --once), no request of ours."""
    while True:
        for c in servers.clients:
            sample = await c.sample()
            if sample is not None:
                shown = [f"{figure_text(k, v)} [{sample.sources.get(k, '?')}]" for k, v in sample.values.items() if v is not None]
                print(f"{c.levers.server}: " + ("; ".join(shown) or "no figure yet (counters need two scrapes)"), flush=True)
        if args.once:
            return 0
        await asyncio.sleep(args.every)


def fleet_main(args: Options) -> int:
    """`attach --prometheus URL`: the fleet's TUI (runs to URL, or to replicas found), or --no-tui's table."""
    from tui_app.commands.fleet import fleet_config, headless

    if args.no_tui:
        if args.url:
            raise UsageError("--no-tui with --prometheus prints the fleet and sends nothing; for runs of your own beside it, leave out --no-tui")
        cfg = fleet_config(args, [])
        recorder = open_recording(args)
        try:
            return asyncio.run(headless(cfg, args.once, args.output, recorder))
        finally:
            if recorder is not None:
                recorder.close()
                print(f"recorded to {recorder.path}", file=sys.stderr)
    if args.once:
        raise UsageError("--once is for --no-tui (the TUI refreshes every --every)")
    if not args.watch:
        run_request(args)
    runs = attach_configs(args, args.url) if args.url and not args.watch else []
    cfg = fleet_config(args, runs)
    if not runs and not args.watch:
        if args.label:
            raise UsageError("--label names the URLs given; replicas found in Prometheus are named host:port")
        cfg.template = attach_configs(args, ["http://127.0.0.1"])[0]  # a found replica's URL replaces this one
    from tui_app.core.sources import FleetSource
    from tui_app.folders import cache_root
    from tui_app.ui.launch import run_tui

    log_dir = cache_root()
    log_dir.mkdir(parents=True, exist_ok=True)
    source = FleetSource(cfg, str(log_dir / "attach.log"))
    return run_tui(args, lambda: source, NO_TUI)


def attach_demo(args: Options) -> int:
    """`tokentop attach URL [URL ...] --demo`: the server tour (tour.server_tour) on those servers."""
    from tui_app.commands.demo import tui_tour

    configs = attach_configs(args, choose_urls(args))
    steps = server_tour(len(configs))
    if args.no_tui:
        return asyncio.run(_headless_tour(args, configs, steps))
    source = attach_source(configs)
    return tui_tour(args, steps, lambda: source, NO_TUI)


async def _headless_tour(args: Options, configs, steps) -> int:
    from tui_app.commands.demo import run_server_tour

    async with connected(args, configs) as (servers, session):
        print(f"a tour of {len(steps)} steps on {len(configs)} server{'s' if len(configs) > 1 else ''}", flush=True)
        log = await run_server_tour(servers, session, steps, say=lambda line: print(line, flush=True))
    return 0 if all(r.figures is not None and not r.refused for r in log.results.values()) else 1
