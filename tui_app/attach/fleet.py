"""`tokentop attach --prometheus URL`: a fleet of replicas read from the Prometheus that already
scrapes them (monitors.fleet), beside tokentop's own requests to one of them.

The watcher asks Prometheus every `--every` (a fixed set of queries, however many replicas),
fills the past first from `query_range`, and emits FleetReady and FleetSample events; it runs in
the attach client's process beside the `Servers` that stream tokentop's own runs, so the UI only
draws. Runs go to the URLs given, else to up to FLEET_RUNS replicas found among Prometheus'
targets that answer the OpenAI API (`t` moves the next run to the next one). `--watch` sends no
request of tokentop's own at all: the fleet's figures only. The command line and the headless
table are tui_app/commands/fleet.py; the table's cells, shared with the pane, tui_app/core/fleet.py.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from monitors.events import EngineError, EngineReady, FleetReady, FleetSample, LeverRefused, now_ns
from monitors.fleet import PREFIXES, Fleet, Selector
from monitors.fleet_leaks import Sentinel
from monitors.prometheus import Auth, Prometheus, PrometheusError
from tui_app.attach.client import AttachConfig, server_ready
from tui_app.attach.loop import Servers, _Batches, _get, _waiting
from tui_app.requests import Run, SetLever, Shutdown

FLEET_RUNS = 4  # replicas tokentop's own runs move between (t), as attach compares up to four servers
NO_REPLICA = "no replica that Prometheus scrapes answers the OpenAI API from here (GET /v1/models)"
WATCHING = "--watch: tokentop sends no request of its own; the figures are the fleet's traffic alone"


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
    leak_span_s: float = 900.0  # the leak sentinel's span; 0: no sentinel
    watch: bool = False
    runs: list = field(default_factory=list)  # AttachConfig of each URL given for tokentop's own runs
    template: AttachConfig | None = None  # the options of a replica found in Prometheus, its URL aside
    first_run_id: int = 1
    find_s: float = 60.0  # how long runs wait for a replica (a rolling restart; a scrape that failed once)


class FleetWatcher:
    """Asks Prometheus every `every_s`, emits what it found; says each failure once, and its end."""

    def __init__(self, cfg: FleetConfig, emit):
        self.cfg = cfg
        self.emit = emit
        self.prom = Prometheus(cfg.prometheus, Auth(cfg.token_env, cfg.basic_env), insecure=cfg.insecure)
        selector = Selector(cfg.match)
        span = cfg.leak_span_s
        # Sixty points a span, refitted at most every 30 s (sooner for a short span): one query_range each time.
        sentinel = Sentinel(self.prom, selector, cfg.window_s, span_s=span, step_s=max(span / 60, 1.0), every_s=min(30.0, span / 10)) if span > 0 else None
        self.fleet = Fleet(self.prom, selector, cfg.window_s, sentinel=sentinel)
        self.error = ""
        self.rows: list[dict] = []  # the last refresh's

    async def aclose(self) -> None:
        await self.prom.aclose()

    async def start(self) -> FleetReady:
        """Prometheus checked and the past emitted; PrometheusError says why it cannot be used."""
        version = await self.fleet.check()
        ready = FleetReady(
            url=self.prom.url,
            version=version,
            selector=str(self.fleet.selector),
            window_s=self.cfg.window_s,
            every_s=self.cfg.every_s,
            queries=dict(self.fleet.queries),
            watch=self.cfg.watch,
        )
        self.emit(ready)
        if self.cfg.backfill_s > 0:
            try:
                past = await self.fleet.backfill(self.cfg.backfill_s, self.cfg.every_s)
            except PrometheusError as exc:
                self.emit(FleetSample(t_ns=now_ns(), ts=time.time(), rows=[], fleet={}, notes=[f"the fleet's past is not shown: {exc}"], backfill=True))
                return ready
            now_wall, now_mono = time.time(), now_ns()
            for ts, figures in past:
                self.emit(FleetSample(t_ns=now_mono - int((now_wall - ts) * 1e9), ts=ts, rows=[], fleet=figures, backfill=True))
        return ready

    async def refresh(self) -> FleetSample | None:
        try:
            ts, rows, figures, notes = await self.fleet.refresh()
        except PrometheusError as exc:
            if str(exc) != self.error:
                self.error = str(exc)
                self.emit(FleetSample(t_ns=now_ns(), ts=time.time(), rows=[], fleet={}, error=self.error))
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
        ev = FleetSample(t_ns=now_ns(), ts=ts, rows=rows, fleet=figures, notes=notes, error=said, others=list(self.fleet.others))
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
    server = {
        "engine": f"Prometheus {version}",
        "url": cfg.prometheus,
        "metrics_url": cfg.prometheus,
        "label": "fleet",
        "pid": None,
        "kv_note": "a fleet: each replica's KV usage is in the fleet pane",
        "chat": True,
        "watch": True,
    }
    return server_ready("fleet", cfg.prometheus, "Prometheus", "fleet", server)


def _refused(cmd, reason: str, emit) -> bool:
    """A command while tokentop sends no request of its own: keys that would send one say why
    not; False: shut down."""
    match cmd:
        case Shutdown():
            return False
        case Run():
            emit(LeverRefused(lever="run", value="", reason=reason))
        case SetLever(lever=name, value=value):
            emit(LeverRefused(lever=name, value=value, reason=reason))
    return True


async def _commands_refused(commands, emit) -> None:
    """--watch on a fleet: keys that would send a request say why not, until shutdown."""
    loop = asyncio.get_running_loop()
    while _refused(await loop.run_in_executor(None, _get, commands), WATCHING, emit):
        pass


async def _find_replicas(watcher: FleetWatcher, cfg: FleetConfig, commands, out) -> list[str] | None:
    """The replicas runs go to, looked for again every `every_s` until `find_s` has passed ([]: none);
    None: the UI shut down meanwhile. Keys that would send a request meanwhile say why not."""
    deadline = time.monotonic() + cfg.find_s
    roots = await watcher.api_replicas()
    if not roots:
        out(EngineError(message=f"{NO_REPLICA} yet: looking again every {cfg.every_s:g} s for {cfg.find_s:.0f} s"))
    while not roots and time.monotonic() < deadline:
        if not all(_refused(cmd, f"{NO_REPLICA} yet (looking until one does)", out) for cmd in _waiting(commands)):
            return None
        await asyncio.sleep(cfg.every_s)
        roots = await watcher.api_replicas()
    return roots


async def _serve(cfg: FleetConfig, commands, events) -> None:
    out = _Batches(events.put)
    flusher = asyncio.create_task(out.run())
    watcher = FleetWatcher(cfg, out)
    tasks: list[asyncio.Task] = []
    try:
        try:
            ready = await watcher.start()
        except PrometheusError as exc:
            out(EngineError(message=str(exc), fatal=True))
            return
        tasks.append(asyncio.create_task(watcher.run()))
        if cfg.watch:
            out(watch_ready(cfg, ready.version))
            await _commands_refused(commands, out)
            return
        configs = cfg.runs
        if not configs and cfg.template is not None:
            roots = await _find_replicas(watcher, cfg, commands, out)
            if roots is None:
                return
            if not roots:
                out(EngineError(message=f"{NO_REPLICA} within {cfg.find_s:.0f} s: give the URL runs go to (a router or one replica), or --watch", fatal=True))
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
    """The fleet client's process entry point (spawned by tui_app.process.EngineProcess)."""
    from tui_app.process import quiet_process

    if quiet_process(log_path, events):
        asyncio.run(_serve(cfg, commands, events))
