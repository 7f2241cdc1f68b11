"""`tokentop attach [URL]`: choose the server, then the TUI or (--no-tui) each run's numbers."""

from __future__ import annotations

import asyncio
import sys

from monitors.events import EngineError, RunFinished, ServerSample
from tui_app.fmt import figure_text
from tui_app.options import EXIT_USAGE, UsageError, attach_config, make_recorder, run_request


def choose_url(args) -> str:
    """The URL given, or the one server found on this host; UsageError lists what was tried or found."""
    if args.url:
        return args.url
    from tui_app.attach.discover import find_servers

    found, tried = find_servers()
    if not found:
        ports = ", ".join(u.rsplit(":", 1)[1] for u in tried)
        raise UsageError(f"no OpenAI-compatible server answers /v1/models on this host (tried ports {ports}); give its URL: tokentop attach http://HOST:PORT")
    if len(found) > 1:
        listing = "; ".join(f"{url} ({', '.join(ids)})" for url, ids in found)
        raise UsageError(f"several servers answer here: {listing}; choose one: tokentop attach URL")
    url, ids = found[0]
    print(f"tokentop: attaching to {url} ({', '.join(ids)})", file=sys.stderr)
    return url


def attach_main(args, tui) -> int:
    """`tui(args, source)` draws the app (the CLI's, which owns the terminal checks)."""
    request = run_request(args)
    cfg = attach_config(args, choose_url(args))
    if args.no_tui:
        return asyncio.run(_headless(args, cfg, request))
    from tui_app.engine.models import cache_root
    from tui_app.sources import AttachSource

    log_dir = cache_root()
    log_dir.mkdir(parents=True, exist_ok=True)
    return tui(args, AttachSource(cfg, str(log_dir / "attach.log")))


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


async def _headless(args, cfg, request) -> int:
    from monitors.record import RecordError
    from tui_app.attach.client import AttachError, ServerClient
    from tui_app.headless import row_line
    from tui_app.session import Session

    try:
        recorder = make_recorder(args)
    except RecordError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    session = Session(recorder=recorder)
    said: list[str] = []

    def tell(ev) -> None:
        if isinstance(ev, EngineError) or (isinstance(ev, ServerSample) and ev.error):
            text = ev.message if isinstance(ev, EngineError) else ev.error
            said.append(text)
            print(f"tokentop: {text}", file=sys.stderr, flush=True)

    session.listeners.append(tell)
    client = ServerClient(cfg, session.feed)
    metrics = None
    try:
        try:
            ready = await client.connect()
        except AttachError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return EXIT_USAGE
        where = f"pid {client.pid}" if client.pid else "not on this host"
        print(f"{ready.device} server at {ready.source} ({where}): model {ready.model}, metrics {client.metrics_url}", flush=True)
        metrics = asyncio.create_task(client.metrics_loop())
        await asyncio.sleep(0)
        failed = False
        for _ in range(args.runs):
            fin = await client.run(request)
            if fin is None:
                return EXIT_USAGE
            if args.runs == 1:
                print(fin.text.strip(), flush=True)
            for row in session.rows():
                if row.run_id == fin.run_id:
                    print(row_line(row), flush=True)
            await client.sample()
            print(server_line(fin, session.server[-1] if session.server else None), flush=True)
            failed = failed or fin.stop_reason == "error"
        if session.verdict and args.runs > 1:
            print(session.verdict.text().replace("leak:", "server leak:"))
        return 1 if failed else 0
    finally:
        if metrics is not None:
            metrics.cancel()
            await asyncio.gather(metrics, return_exceptions=True)
        await client.aclose()
        if recorder is not None:
            recorder.close()
            print(f"recorded to {recorder.path}", file=sys.stderr)
