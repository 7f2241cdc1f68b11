"""Attached servers behind one command loop, in a process of their own beside the UI (like the
engine): commands in, events out, a few milliseconds of events per queue put."""

from __future__ import annotations

import asyncio
import queue
from dataclasses import replace

from monitors.events import EngineError, LeverChanged, LeverRefused, RunFinished
from monitors.system import trim_heap
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.attach.errors import AttachError
from tui_app.requests import Command, Pause, Resume, Run, SetLever, Shutdown, Stop


class Servers:
    """Up to four attached servers behind one command loop, for comparing them: runs go to the
    active one (`t` moves to the next), run numbers are shared, each server's /metrics is scraped."""

    def __init__(self, configs: list[AttachConfig], emit):
        self.emit = emit
        self.clients = [ServerClient(c, emit) for c in configs]
        self.active = 0
        self.next_run_id = configs[0].first_run_id
        self.current: asyncio.Task | None = None  # the run in flight, under serve()
        self.otlp = None  # (receiver, joiner, its task) with --otlp

    @property
    def client(self) -> ServerClient:
        return self.clients[self.active]

    async def connect(self) -> None:
        for c in self.clients:
            await c.connect()
        if len(self.clients) > 1:  # the first server is where runs start
            self.emit(LeverChanged(run_id=None, lever="server", value=self.client.levers.server, levers=self.client.levers))
        cfg = self.clients[0].cfg
        if cfg.otlp is not None and self.otlp is None:
            self.start_otlp(cfg.otlp, cfg.otlp_grace_s)

    def start_otlp(self, address: str, grace_s: float) -> None:
        """The OTLP receiver for every attached server's spans; where it cannot listen, one line
        says why and the servers are watched without it."""
        from tui_app.attach.joiner import start
        from tui_app.attach.otlp import ReceiverError

        try:
            receiver, joiner = start(address, asyncio.get_running_loop(), self.emit, grace_s)
        except (ReceiverError, ValueError) as exc:
            self.emit(EngineError(message=str(exc)))
            return
        for c in self.clients:
            c.tracing.joiner = joiner
        self.otlp = (receiver, joiner, asyncio.create_task(joiner.run()))
        joiner.tick()

    async def run(self, req) -> RunFinished | None:
        c = self.client
        c.run_id = self.next_run_id - 1
        fin = await c.run(req)
        self.next_run_id = c.run_id + 1
        # A run's streams free their buffers at its end; without giving the pages back the client's
        # RSS rose 2.3 MiB over 90 runs of 32 streams with no Python object left behind (0.3 with it),
        # and an attached soak read that as a leak (the UI trims after each run for the same reason).
        trim_heap()
        return fin

    def set_lever(self, name: str, value) -> None:
        if name == "server":
            labels = [c.levers.server for c in self.clients]
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= len(labels):
                value = labels[value - 1]  # a tour names a server by its place among the URLs
            if value not in labels:
                self.emit(LeverRefused(lever=name, value=value, reason="t moves between attached servers: attach to two or more (tokentop attach URL_A URL_B)"))
                return
            self.active = labels.index(value)
            self.emit(LeverChanged(run_id=None, lever="server", value=value, levers=self.client.levers))
            return
        self.client.set_lever(name, value)
        if name == "batch":  # one concurrency for every server, so their runs compare
            for c in self.clients:
                c.levers = replace(c.levers, batch=self.client.levers.batch)

    async def aclose(self) -> None:
        if self.otlp is not None:
            receiver, joiner, task = self.otlp
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            joiner.tick()  # the spans that came in the last second
            receiver.close()
            self.otlp = None
        for c in self.clients:
            await c.aclose()

    async def serve(self, commands) -> None:
        """Commands in (tui_app.requests), events out, until Shutdown."""
        loop = asyncio.get_running_loop()
        try:
            await self.connect()
        except AttachError as exc:
            self.emit(EngineError(message=str(exc), fatal=True))
            await self.aclose()
            return
        metrics = [asyncio.create_task(c.metrics_loop()) for c in self.clients if c.cfg.metrics_hz > 0]
        try:
            while await self.command(await loop.run_in_executor(None, _get, commands)):
                pass
        finally:
            running = [*metrics, *([self.current] if self.current else [])]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await self.aclose()

    async def command(self, cmd: Command) -> bool:
        """Every command the client takes, in one place; False: shut down."""
        match cmd:
            case Shutdown():
                return False
            case Stop() | Run():
                if self.current is not None and not self.current.done():
                    self.current.cancel()
                    await asyncio.gather(self.current, return_exceptions=True)
                if isinstance(cmd, Run) and self.client.cfg.watch:
                    reason = "--watch: tokentop sends no request of its own (leave out --watch to run prompts)"
                    self.emit(LeverRefused(lever="run", value="", reason=reason))
                elif isinstance(cmd, Run):
                    self.current = asyncio.create_task(self.run(cmd.request))
            case SetLever(lever=name, value=value):
                self.set_lever(name, value)
            case Pause() | Resume():
                reason = "a server's generation cannot be paused by a client; the stream goes on (a turns auto-repeat off, r stops and reruns)"
                self.emit(LeverRefused(lever="pause", value=isinstance(cmd, Pause), reason=reason))
        return True


def _get(commands):
    while True:
        try:
            return commands.get(timeout=0.5)
        except queue.Empty:
            continue
        except (EOFError, OSError, ValueError):  # the UI went away
            return Shutdown()


def _waiting(commands):
    """The commands sent so far, without waiting for more; Shutdown where the UI went away."""
    while True:
        try:
            yield commands.get_nowait()
        except queue.Empty:
            return
        except (EOFError, OSError, ValueError):
            yield Shutdown()
            return


class _Batches:
    """Events to the UI a few milliseconds at a time, one queue put per batch: at a fast server's
    thousands of chunks a second, a put and a get per event cost the two processes more than the
    events themselves (measured by benchmarks/serving/chunk_rate.py). Timestamps are taken on arrival, so
    batching moves none of them."""

    EVERY_S = 0.005

    def __init__(self, put):
        self.put = put
        self.pending: list = []

    def __call__(self, event) -> None:
        self.pending.append(event)

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.put(batch)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.EVERY_S)
            self.flush()


async def _serve(configs: list[AttachConfig], commands, events) -> None:
    out = _Batches(events.put)
    flusher = asyncio.create_task(out.run())
    try:
        await Servers(configs, out).serve(commands)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        out.flush()


def client_main(configs: list[AttachConfig], commands, events, log_path: str | None) -> None:
    """The client process's entry point (spawned by tui_app.process.EngineProcess)."""
    from tui_app.process import quiet_process

    if quiet_process(log_path, events):
        asyncio.run(_serve(configs, commands, events))
