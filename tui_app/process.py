"""The process boundary: the engine, or an attached server's client, runs in its own (spawned)
process beside the UI; commands in, events out. What runs there is the `target` (the engine's
`tui_app.engine.main.engine_main`, the client's `tui_app.attach.loop.client_main`); this module
imports neither, so the UI reaches the engine only through the process.

Why a process and not a thread (measured on the 2-core machine, see DESIGN.md): a UI loop in the
same process slowed generation to 0.55-0.6x through the GIL; in a separate process 0.95-1.0x.
It also keeps the engine's memory apart from the UI's (so the leak detector sees the engine
alone), and a crash or an OOM kill of the engine leaves the UI standing to report it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from monitors.codec import Event
from monitors.events import EngineError
from tui_app import stacks
from tui_app.requests import Shutdown, Stop

UI_NICE = 5  # how far the UI steps back from the processes it measures (yield_to_children)

_spawner_pool: tuple[ThreadPoolExecutor, int] | None = None  # made on first need (yield_to_children)
_yielded = False


def _spawner() -> tuple[ThreadPoolExecutor, int]:
    """The thread every child (the engine, a server's client) starts from, and its id: made before
    the UI lowers its threads' priority, since a child inherits the nice value of the thread that
    starts it. Only a process that starts children makes one."""
    global _spawner_pool
    if _spawner_pool is None:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokentop-spawn")
        _spawner_pool = pool, pool.submit(threading.get_native_id).result()
    return _spawner_pool


def yield_to_children() -> None:
    """Lower every thread of this (the UI's) process but the spawner by UI_NICE. Where the engine
    or the attach client wants the core the UI is drawing on, the kernel then hands it over: a
    chunk's arrival, or a token's step, is not delayed by a frame (benchmarks/serving/chunk_rate.py at 2,000
    chunks/s: the lag's p99 about a quarter of what it is without; docs/performance.md).
    Where threads cannot be reniced one by one (not Linux), nothing changes. Once a process."""
    global _yielded
    if _yielded:
        return
    _yielded = True
    _, spawner_tid = _spawner()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        for tid in tids:
            if tid != spawner_tid:
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + UI_NICE)
    except OSError:
        pass


@dataclass
class ExitInfo:
    exitcode: int | None
    message: str


def describe_exit(code: int | None, what: str = "engine") -> str:
    if code is None:
        return f"{what} is running"
    if code == 0:
        return f"{what} exited"
    if code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        hint = " (killed: out of memory, or by hand)" if sig == signal.SIGKILL else ""
        return f"{what} process died from {name}{hint}"
    return f"{what} process exited with code {code}"


def quiet_process(log_path: str | None, events) -> bool:
    """Start of a process beside the UI (the engine, a server's client); False, said on `events`,
    when its log cannot be written."""
    # Ctrl-C reaches the whole process group; the UI decides when this process ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    if log_path:
        # Library warnings written to the terminal would draw over the TUI: send them to a log.
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:  # a traceback here would be drawn over the TUI, and say nothing of the fix
            events.put(EngineError(message=f"cannot write the log {log_path} ({exc.strerror or exc}); set TOKENTOP_CACHE to a writable folder", fatal=True))
            return False
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    stacks.on_request()
    return True


def _end_with_parent(every_s: float = 0.5) -> None:
    """This process ends when the UI does, however the UI ended. A UI killed (kill -9, the OOM
    killer) cannot say shutdown, and its queues never report EOF (this process holds both ends of
    each): an orphaned engine would keep its memory, an orphaned client go on streaming from the
    server and scraping its /metrics, for good."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="tokentop-parent-watch", daemon=True).start()


class EngineProcess:
    """Owns the engine's process (or an attached server's client: `target`) and its two queues."""

    def __init__(self, config, log_path: str | None = None, *, target, what: str = "engine"):
        """`what`: the process's name in what the UI says of its end ("engine", "server client")."""
        # Under Textual sys.stderr is a capture without a real file descriptor, which
        # multiprocessing's resource tracker (started with the first queue) needs.
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        try:
            ctx = mp.get_context("spawn")  # fork would copy the UI's threads and torch state
            self.commands: mp.Queue = ctx.Queue()
            self.events: mp.Queue = ctx.Queue()
            self.proc = ctx.Process(target=target, args=(config, self.commands, self.events, log_path), name="tokentop-engine", daemon=True)
        finally:
            sys.stdout, sys.stderr = saved
        self.config = config
        self.what = what

    def start(self) -> EngineProcess:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        try:
            _spawner()[0].submit(self.proc.start).result()
        finally:
            sys.stdout, sys.stderr = saved
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.is_alive()

    def exit_info(self) -> ExitInfo:
        return ExitInfo(self.proc.exitcode, describe_exit(self.proc.exitcode, self.what))

    def send(self, cmd) -> None:
        """A command (tui_app.requests) to the process."""
        self.commands.put(cmd)

    def drain(self, limit: int = 10_000) -> list[Event]:
        """Every event waiting now, without blocking (the UI calls this once per frame)."""
        out: list[Event] = []
        while len(out) < limit:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                break
            except (EOFError, OSError, ValueError):  # queue torn down with a dead engine
                break
            if isinstance(item, list):  # a server client's batch
                out.extend(item)
            else:
                out.append(item)
        return out

    def get(self, timeout: float | None = None) -> Event | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def shutdown(self, timeout: float = 3.0) -> None:
        if self.proc.is_alive():
            try:
                self.send(Stop())
                self.send(Shutdown())
            except (OSError, ValueError):
                pass
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(1.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)
        for q in (self.commands, self.events):
            q.cancel_join_thread()
            q.close()
