"""`tokentop attach --prometheus URL`'s options and its headless table (`--no-tui`): the fleet
printed each `--every` (or `--once`), as a table or one JSON object a refresh."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from dataclasses import dataclass, replace

from monitors.events import FleetReady, FleetSample
from monitors.fleet import ROW_FIGURES, Selector, SelectorError
from monitors.prometheus import PrometheusError
from tui_app.attach.fleet import FleetConfig, FleetWatcher
from tui_app.core import fmt
from tui_app.core.fleet import energy_text, fmt_age, table_text
from tui_app.core.options import UsageError, bounded


def duration(lo: float, hi: float, lo_open: bool = False, why: str = ""):
    """An argparse type: seconds from "500ms", "5s", "2m", "1h" or a bare number of seconds, in
    the range of tui_app.core.options.bounded (whose `.bounds` it carries)."""
    check = bounded(float, lo, hi, lo_open, why)

    def parse(text: str) -> float:
        m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
        if not m:
            raise argparse.ArgumentTypeError(f"expected a duration such as 5s, 500ms, 2m or 1h, got {text!r}")
        return check(str(float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]))

    parse.bounds = check.bounds  # type: ignore[attr-defined]  # read by the bounds test
    return parse


@dataclass(kw_only=True)
class FleetOptions:
    """`attach --prometheus URL`'s own options (and --watch, which a single server takes too)."""

    prometheus: str | None
    match: str
    prometheus_token_env: str | None
    prometheus_basic_env: str | None
    window: float
    every: float
    backfill: float
    leak_span: float
    once: bool
    output: str
    watch: bool


def add_fleet_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "fleet (through the Prometheus that scrapes it)",
        f"A row per replica from PromQL over Prometheus' HTTP API ({len(ROW_FIGURES) + 2} queries each --every, however many replicas): "
        "tokentop scrapes none of them itself.",
    )
    g.add_argument("--prometheus", default=os.environ.get("TOKENTOP_PROMETHEUS"), metavar="URL", help="Prometheus' base URL (default: $TOKENTOP_PROMETHEUS)")
    g.add_argument("--match", default="", metavar="SELECTOR", help="the replicas: a label selector such as '{job=\"vllm\"}' (default: every target)")
    g.add_argument("--prometheus-token-env", default=None, metavar="VAR", help="the environment variable holding a bearer token for Prometheus")
    g.add_argument("--prometheus-basic-env", default=None, metavar="VAR", help="the environment variable holding user:password for Prometheus' basic auth")
    day = 86400.0
    g.add_argument(
        "--window",
        type=duration(0, day, lo_open=True, why="seconds of rates and quantiles"),
        default=60.0,
        help="the window of rates and quantiles (default 1m; two scrape intervals or more)",
    )
    every = duration(0, 3600, lo_open=True, why="seconds between refreshes")
    g.add_argument("--every", type=every, default=2.0, help="how often Prometheus is asked (default 2s)")
    past = duration(0, 7 * day, why="seconds of the past")
    g.add_argument("--backfill", type=past, default=900.0, help="the past shown at once, from query_range (default 15m; 0: none)")
    g.add_argument(
        "--leak-span",
        type=duration(0, day, why="seconds of memory the leak sentinel fits"),
        default=900.0,
        help="the leak sentinel's span: each replica's memory over this long, fitted beside its load (default 15m; 0: off)",
    )
    g.add_argument("--once", action="store_true", help="with --no-tui: print the fleet once and exit")
    g.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="with --no-tui: lines (a fleet: a table), or one JSON object a run (a fleet: a refresh)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="send no request of tokentop's own (the operator's mode): one server's /metrics only, or the fleet through Prometheus. "
        "Without it tokentop's runs are load on the server: one run at a time of --concurrency streams of up to --max-new-tokens "
        "tokens, one per r, or with a (auto-repeat) back to back 0.3 s apart, about concurrency ÷ (run seconds + 0.3) requests a second; "
        "and a GET /metrics each 1/--metrics-hz s",
    )


def fleet_config(args, runs: list) -> FleetConfig:
    """The fleet's watcher configuration from attach's options (FleetOptions, and its --insecure)."""
    if not args.prometheus:
        raise UsageError("--prometheus URL (or TOKENTOP_PROMETHEUS) names the Prometheus to read the fleet from")
    try:
        Selector(args.match)
    except SelectorError as exc:
        raise UsageError(str(exc)) from None
    for var, flag in ((args.prometheus_token_env, "--prometheus-token-env"), (args.prometheus_basic_env, "--prometheus-basic-env")):
        if var is not None and not os.environ.get(var):
            raise UsageError(f"{flag} {var}: that environment variable is not set")
    if args.prometheus_token_env and args.prometheus_basic_env:
        raise UsageError("give --prometheus-token-env or --prometheus-basic-env, not both")
    if args.window < 2 * args.every and args.window < 10:
        print(f"tokentop: warning: --window {args.window:g}s holds few scrapes; rates need two or more of Prometheus' scrape interval", file=sys.stderr)
    return FleetConfig(
        prometheus=args.prometheus,
        match=args.match,
        token_env=args.prometheus_token_env,
        basic_env=args.prometheus_basic_env,
        insecure=args.insecure,
        window_s=args.window,
        every_s=args.every,
        backfill_s=args.backfill,
        leak_span_s=args.leak_span,
        watch=args.watch,
        runs=runs,
    )


def sample_json(sample: FleetSample, url: str, selector: str) -> str:
    data = {"ts": sample.ts, "prometheus": url, "selector": selector, "rows": sample.rows, "fleet": sample.fleet, "notes": sample.notes}
    return json.dumps(fmt.strict_json(data), ensure_ascii=False)


async def headless(cfg: FleetConfig, once: bool, output: str, recorder=None) -> int:
    """Print the fleet each refresh (or once); what fails or changes is one line on stderr, and
    the loop goes on. Exit 0, or with --once 1 when there was no replica to print."""
    shown: dict = {}

    def emit(ev) -> None:
        if recorder is not None:
            recorder.write(ev)
        if isinstance(ev, FleetReady):
            shown.update(url=ev.url, selector=ev.selector)
            if output == "table":
                print(f"Prometheus {ev.version} at {ev.url}, replicas {ev.selector}, window {fmt_age(cfg.window_s)}", flush=True)
        if not isinstance(ev, FleetSample) or ev.backfill:
            return
        for line in [*ev.notes, *([ev.error] if ev.error else [])]:
            print(f"tokentop: {line}", file=sys.stderr, flush=True)
        if output == "json" and (ev.rows or not ev.error):
            print(sample_json(ev, shown["url"], shown["selector"]), flush=True)
        elif ev.rows:
            print(f"\n{time.strftime('%H:%M:%S', time.localtime(ev.ts))}  {energy_text(ev.fleet)}", flush=True)
            print("\n".join(table_text(ev)), flush=True)

    watcher = FleetWatcher(replace(cfg, backfill_s=0), emit)
    try:
        try:
            await watcher.start()
        except PrometheusError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return 2
        while True:
            t0 = time.monotonic()
            sample = await watcher.refresh()
            if once:
                return 0 if sample is not None and sample.rows else 1
            await asyncio.sleep(max(cfg.every_s - (time.monotonic() - t0), 0.05))
    finally:
        await watcher.aclose()
