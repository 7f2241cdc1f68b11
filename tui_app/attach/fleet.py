"""`tokentop attach --prometheus URL`: a fleet of replicas read from the Prometheus that already
scrapes them (monitors.fleet), beside tokentop's own requests to one of them.

The watcher asks Prometheus every `--every` (a fixed set of queries, however many replicas),
fills the past first from `query_range`, and emits FleetReady and FleetSample events; it runs in
the attach client's process beside the `Servers` that stream tokentop's own runs, so the UI only
draws. Runs go to the URLs given, else to up to FLEET_RUNS replicas found among Prometheus'
targets that answer the OpenAI API (`t` moves the next run to the next one). `--watch` sends no
request of tokentop's own at all: the fleet's figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from monitors.events import EngineError, EngineReady, FleetReady, FleetSample, LeverRefused, now_ns
from monitors.fleet import PREFIXES, ROW_FIGURES, Fleet, Selector, SelectorError, row_name
from monitors.prometheus import Auth, Prometheus, PrometheusError
from tui_app import fmt
from tui_app.attach.client import CONCURRENCY, SERVER_OWNED, AttachConfig, Servers, _Batches, _get

FLEET_RUNS = 4  # replicas tokentop's own runs move between (t), as attach compares up to four servers
WATCHING = "--watch: tokentop sends no request of its own; the figures are the fleet's traffic alone"


def duration(lo: float, hi: float, lo_open: bool = False, why: str = ""):
    """An argparse type: seconds from "500ms", "5s", "2m", "1h" or a bare number of seconds, in
    the range of tui_app.options.bounded (whose `.bounds` it carries)."""
    from tui_app.options import bounded

    check = bounded(float, lo, hi, lo_open, why)

    def parse(text: str) -> float:
        m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
        if not m:
            raise argparse.ArgumentTypeError(f"expected a duration such as 5s, 500ms, 2m or 1h, got {text!r}")
        return check(str(float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]))

    parse.bounds = check.bounds  # type: ignore[attr-defined]  # read by the bounds test
    return parse


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
    g.add_argument("--once", action="store_true", help="with --no-tui: print the fleet once and exit")
    g.add_argument("-o", "--output", choices=("table", "json"), default="table", help="with --no-tui: a table, or one JSON object a refresh")
    p.add_argument(
        "--watch",
        action="store_true",
        help="send no request of tokentop's own (the operator's mode): one server's /metrics only, or the fleet through Prometheus. "
        "Without it tokentop's runs are load on the server: one run at a time of --concurrency streams of up to --max-new-tokens "
        "tokens, one per r, or with a (auto-repeat) back to back 0.3 s apart, about concurrency ÷ (run seconds + 0.3) requests a second; "
        "and a GET /metrics each 1/--metrics-hz s",
    )


@dataclass
class FleetConfig:
    prometheus: str
    match: str = ""
    token_env: str | None = None
    basic_env: str | None = None
    insecure: bool = False
    window_s: float = 60.0
    every_s: float = 2.0
    backfill_s: float = 900.0
    watch: bool = False
    runs: list = field(default_factory=list)  # AttachConfig of each URL given for tokentop's own runs
    template: AttachConfig | None = None  # the options of a replica found in Prometheus, its URL aside
    first_run_id: int = 1


class FleetWatcher:
    """Asks Prometheus every `every_s`, emits what it found; says each failure once, and its end."""

    def __init__(self, cfg: FleetConfig, emit):
        self.cfg = cfg
        self.emit = emit
        self.prom = Prometheus(cfg.prometheus, Auth(cfg.token_env, cfg.basic_env), insecure=cfg.insecure)
        self.fleet = Fleet(self.prom, Selector(cfg.match), cfg.window_s)
        self.error = ""
        self.rows: list[dict] = []  # the last refresh's

    async def aclose(self) -> None:
        await self.prom.aclose()

    async def start(self) -> FleetReady:
        """Prometheus checked and the past emitted; PrometheusError says why it cannot be used."""
        version = await self.fleet.check()
        ready = FleetReady(self.prom.url, version, str(self.fleet.selector), self.cfg.window_s, self.cfg.every_s, dict(self.fleet.queries), self.cfg.watch)
        self.emit(ready)
        if self.cfg.backfill_s > 0:
            try:
                past = await self.fleet.backfill(self.cfg.backfill_s, self.cfg.every_s)
            except PrometheusError as exc:
                self.emit(FleetSample(now_ns(), time.time(), [], {}, notes=[f"the fleet's past is not shown: {exc}"], backfill=True))
                return ready
            now_wall, now_mono = time.time(), now_ns()
            for ts, figures in past:
                self.emit(FleetSample(now_mono - int((now_wall - ts) * 1e9), ts, [], figures, backfill=True))
        return ready

    async def refresh(self) -> FleetSample | None:
        try:
            ts, rows, figures, notes = await self.fleet.refresh()
        except PrometheusError as exc:
            if str(exc) != self.error:
                self.error = str(exc)
                self.emit(FleetSample(now_ns(), time.time(), [], {}, error=self.error))
            return None
        error = ""
        unmatched = self.error.startswith(("no replica", "the targets"))
        if not rows and unmatched:
            error = self.error  # said already: Prometheus' targets are not listed again each refresh
        elif not rows:
            error = f"no replica matches {self.fleet.selector}: {await self.fleet.describe_targets()}"
            if self.fleet.others:
                jobs = ", ".join(f'job="{j}"' for j in self.fleet.others)
                error = f"the targets {self.fleet.selector} matches ({jobs}) export no serving engine's metrics ({PREFIXES})"
        if self.error and not error:
            notes.insert(0, f"{len(rows)} replicas match now" if unmatched else f"Prometheus at {self.prom.url} answers again")
        said = error if error != self.error else ""
        self.error = error
        self.rows = rows
        ev = FleetSample(now_ns(), ts, rows, figures, notes, error=said, others=list(self.fleet.others))
        self.emit(ev)
        return ev

    async def run(self) -> None:
        while True:
            t0 = time.monotonic()
            await self.refresh()
            await asyncio.sleep(max(self.cfg.every_s - (time.monotonic() - t0), 0.05))

    async def api_replicas(self, limit: int = FLEET_RUNS) -> list[str]:
        """The roots of up to `limit` replicas that Prometheus scrapes and that answer the OpenAI
        API's GET /v1/models, in the order of its targets."""
        try:
            targets = await self.prom.targets()
        except PrometheusError:
            return []
        if not self.rows:
            await self.refresh()
        replicas = {(r["job"], r["instance"]) for r in self.rows if r.get("family")}
        roots: list[str] = []
        for t in targets:
            labels = t.get("labels") or {}
            if (labels.get("job"), labels.get("instance")) in replicas and t.get("health") == "up":
                p = urlsplit(t.get("scrapeUrl", ""))
                root = f"{p.scheme}://{p.netloc}"
                if root not in roots:
                    roots.append(root)
        found = []
        async with httpx.AsyncClient(timeout=2.0) as http:
            for root in roots:
                try:
                    r = await http.get(root + "/v1/models")
                    if r.status_code == 200 and isinstance(r.json().get("data"), list):
                        found.append(root)
                except (httpx.HTTPError, ValueError, AttributeError):
                    continue
                if len(found) >= limit:
                    break
        return found


def watch_ready(cfg: FleetConfig, version: str) -> EngineReady:
    """In --watch, no server is connected: the fleet stands in its place in the status line."""
    return EngineReady(
        model="fleet",
        source=cfg.prometheus,
        device="Prometheus",
        dtype="fleet",
        n_params=0,
        weight_bytes=0,
        n_layers=0,
        kv_heads=0,
        head_dim=0,
        kv_bytes_per_elem=0,
        context_len=0,
        load_s=0.0,
        threads=0,
        server={
            "engine": f"Prometheus {version}",
            "url": cfg.prometheus,
            "metrics_url": cfg.prometheus,
            "label": "fleet",
            "pid": None,
            "kv_note": "a fleet: each replica's KV usage is in the fleet pane",
            "chat": True,
            "concurrency": list(CONCURRENCY),
            "server_owned": SERVER_OWNED,
            "watch": True,
        },
    )


async def _commands_refused(commands, emit) -> None:
    """--watch on a fleet: keys that would send a request say why not, until shutdown."""
    loop = asyncio.get_running_loop()
    while True:
        cmd = await loop.run_in_executor(None, _get, commands)
        if cmd[0] == "shutdown":
            return
        if cmd[0] in ("run", "lever"):
            emit(LeverRefused(cmd[0] if cmd[0] == "run" else cmd[1], cmd[1] if cmd[0] == "lever" else "", WATCHING))


async def _serve(cfg: FleetConfig, commands, events) -> None:
    out = _Batches(events.put)
    flusher = asyncio.create_task(out.run())
    watcher = FleetWatcher(cfg, out)
    tasks: list[asyncio.Task] = []
    try:
        try:
            ready = await watcher.start()
        except PrometheusError as exc:
            out(EngineError(str(exc), fatal=True))
            return
        tasks.append(asyncio.create_task(watcher.run()))
        if cfg.watch:
            out(watch_ready(cfg, ready.version))
            await _commands_refused(commands, out)
            return
        configs = cfg.runs
        if not configs and cfg.template is not None:
            roots = await watcher.api_replicas()
            if not roots:
                why = "no replica that Prometheus scrapes answers the OpenAI API from here (GET /v1/models)"
                out(EngineError(f"{why}: give the URL runs go to (a router or one replica), or --watch", fatal=True))
                await _commands_refused(commands, out)
                return
            configs = [replace(cfg.template, url=root, label=urlsplit(root).netloc) for root in roots]
        # Only the replicas runs go to are read directly too (the server pane, llama.cpp's KV from our
        # streams); the fleet's figures are Prometheus' alone.
        configs = [replace(c, first_run_id=cfg.first_run_id) for c in configs]
        await Servers(configs, out).serve(commands)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await watcher.aclose()
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        out.flush()


def fleet_main(cfg: FleetConfig, commands, events, log_path: str | None) -> None:
    """The fleet client's process entry point (spawned by tui_app.engine.process.EngineProcess)."""
    from tui_app.engine.process import quiet_process

    if quiet_process(log_path, events):
        asyncio.run(_serve(cfg, commands, events))


# ---------------------------------------------------------------- the table, for the pane and --no-tui

COLUMNS = (
    ("replica", 10),
    ("engine", 6),
    ("up", 4),
    ("KV", 4),
    ("run", 3),
    ("wait", 4),
    ("prompt t/s", 10),
    ("gen t/s", 7),
    ("TTFT p50/p99", 12),
    ("ITL p50/p99", 11),
    ("preempt/s", 9),
    ("prefix", 6),
    ("marks", 5),
)


def _quant(q) -> str:
    if not q:
        return "–"
    return f"{fmt.ms(q.get('p50'), 0, unit=False)}/{fmt.ms(q.get('p99'), 0, unit=False)}"


def up_text(row: dict, now: float) -> str:
    """up / down, since when (as long ago), where tokentop or the backfill saw the change."""
    state = "up" if row.get("up") else "down" if row.get("up") is False else "?"
    since = row.get("since")
    return state if since is None else f"{state} {fmt_age(now - since)}"


def fmt_age(seconds: float) -> str:
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def cells(row: dict, now: float, name: str | None = None) -> list[str]:
    return [
        name or row_name(row),
        row.get("family") or "?",
        up_text(row, now),
        fmt.pct(row.get("kv_usage")),
        fmt.num(row.get("running"), 0),
        fmt.num(row.get("waiting"), 0),
        fmt.num(row.get("prompt_tps"), 1),
        fmt.num(row.get("gen_tps"), 1),
        _quant(row.get("ttft")),
        _quant(row.get("itl")),
        fmt.num(row.get("preemptions"), 2),
        fmt.pct(row.get("prefix_hit")),
        "; ".join(row.get("marks") or ()),
    ]


def fleet_cells(sample: FleetSample) -> list[str]:
    rows = [r for r in sample.rows if not r.get("server")]
    up = sum(1 for r in rows if r.get("up"))
    f = sample.fleet
    return ["fleet", f"{len(rows)}", f"{up}/{len(rows)} up", *cells({**f, "up": None}, sample.ts, name="fleet")[3:12], ""]


def energy_text(fleet: dict) -> str:
    """The fleet's power and joules per generated token, where a DCGM exporter reports them."""
    if fleet.get("power_w") is None:
        return "energy: not reported (no DCGM exporter among Prometheus' targets)"
    text = f"power {fleet['power_w']:.0f} W over {fleet.get('gpus') or 0:.0f} GPUs (DCGM_FI_DEV_POWER_USAGE)"
    jpt = fleet.get("j_per_token")
    text += (
        f", {jpt:.2f} J/token (ΔDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION ÷ Δgenerated tokens)"
        if jpt is not None
        else ", J/token: no tokens generated in the window"
    )
    return text


def _natural(text: str) -> list:
    """replica-2 before replica-10, 10.0.0.9 before 10.0.0.10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text or "")]


def table(sample: FleetSample) -> list[list[str]]:
    """The header, a row per replica (a router's backends after), the fleet's row."""
    out = [[c for c, _ in COLUMNS]]
    rows = sorted(sample.rows, key=lambda r: (bool(r.get("server")), *(_natural(r[k]) for k in ("job", "instance", "engine", "server"))))
    out += [cells(r, sample.ts) for r in rows]
    out.append(fleet_cells(sample))
    return out


def table_text(sample: FleetSample) -> list[str]:
    grid = table(sample)
    widths = [max(len(r[i]) for r in grid) for i in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) if i < 3 or i == len(COLUMNS) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in grid
    ]


# ---------------------------------------------------------------- the headless command


def fleet_config(args, runs: list) -> FleetConfig:
    from tui_app.options import UsageError

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
