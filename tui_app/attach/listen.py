"""`tokentop listen`: the Unix socket a process that calls `tokentop.watch(model)` sends its events
to (attach/watch.py), and the app's source for them; a watched script's processes send to one of
the same kind (attach/script.py). The socket is in a folder only this user can enter (0700) and is
itself 0600. A second `tokentop listen` on the same socket is refused; a socket left by one that
died is replaced.

Each connection (a process) is read by a thread of its own, and their events merged into one run
at a time (`Merge`), the panes' way: a process's run is shown while no other's is open (so of the
ranks of a `torchrun` that generate together, the first; the others' runs are counted and said
once). Runs keep the process's own numbers where they follow on, else go on from the last (a
script's subprocesses each count from 1). The memory pane follows the process whose run is shown
(its pid from the socket's peer credentials, on Linux).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path

from monitors.codec import Event, EventDecodeError, UnknownEventType, from_json
from monitors.events import EngineError, EngineReady, LeverRefused, RunFinished, RunStarted
from tui_app.requests import Confidence, Pause, Probe, Profile, Resume, SetLever, Shutdown, Stop

ACCEPT_POLL_S = 0.5  # how soon the accepting thread sees its socket closed

REFUSED = "{who} sets its own {what}: change it there"


class ListenError(Exception):
    """The socket cannot be made (one line)."""


class Merge:
    """Several processes' events as one stream of runs, one run at a time (see the module's doc)."""

    def __init__(self, into: deque):
        self.into = into
        self.lock = threading.Lock()
        self.last_id = 0
        self.owner: int | None = None  # the connection whose run is open
        self.shown_ready: int | None = None  # whose model the panes show
        self.ready: dict[int, EngineReady] = {}
        self.ids: dict[tuple[int, int], int] = {}  # (connection, its run id) → the run id shown
        self.told: set[int] = set()  # connections told that their run, overlapping another's, is not shown
        self.pid: dict[int, int | None] = {}
        self.peer_pid: int | None = None

    def take(self, conn: int, ev: Event) -> None:
        with self.lock:
            self.into.extend(self._take(conn, ev))

    def _take(self, conn: int, ev) -> list:
        if isinstance(ev, EngineReady):
            self.ready[conn] = ev
            return [self._show_ready(conn)] if self.owner in (None, conn) else []
        run_id = getattr(ev, "run_id", None)
        if not isinstance(ev, (RunStarted, RunFinished)) and (conn, run_id) not in self.ids:
            return [] if run_id is not None else [ev]  # a hidden run's steps, or no run's
        if isinstance(ev, RunStarted):
            if self.owner not in (None, conn):
                if conn in self.told:
                    return []
                self.told.add(conn)
                return [
                    EngineError(
                        message=f"pid {self.pid.get(conn)}'s generation, at the same time as pid {self.peer_pid}'s, is not shown: one process's at a time"
                    )
                ]
            self.owner, self.peer_pid = conn, self.pid.get(conn) or self.peer_pid
            self.last_id = self.ids[conn, run_id] = run_id if run_id > self.last_id else self.last_id + 1
            return [*([self._show_ready(conn)] if self.shown_ready != conn and conn in self.ready else []), replace(ev, run_id=self.last_id)]
        shown = self.ids.get((conn, run_id))
        if shown is None:
            return []
        if isinstance(ev, RunFinished):
            del self.ids[conn, run_id]
            self.owner = None
        return [replace(ev, run_id=shown)]

    def _show_ready(self, conn: int) -> EngineReady:
        self.shown_ready = conn
        return self.ready[conn]

    def closed(self, conn: int) -> None:
        """A process gone: a run it left open no longer holds the panes (the next run says it was cut
        off), and nothing of it is kept (a listener outlives any number of processes)."""
        with self.lock:
            if self.owner == conn:
                self.owner = None
            self.ready.pop(conn, None)
            self.pid.pop(conn, None)
            self.told.discard(conn)
            for key in [k for k in self.ids if k[0] == conn]:
                del self.ids[key]


class Listener:
    def __init__(self, path: Path):
        self.path = path
        self.events: deque[Event] = deque()
        self.merge = Merge(self.events)
        self.readers: list[threading.Thread] = []
        self.connections = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
        except OSError as exc:
            raise ListenError(f"cannot make {path.parent}: {exc.strerror or exc}; set TOKENTOP_LISTEN to a socket path elsewhere") from None
        if _answers(path):
            raise ListenError(f"another tokentop listen is running on {path}")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a listener that died
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.server.bind(str(path))
        except OSError as exc:
            self.server.close()
            raise ListenError(f"cannot listen on {path}: {exc.strerror or exc}") from None
        finally:
            os.umask(old)
        self.server.listen(8)
        self.server.setblocking(False)
        # Held from a connection's accept to its reader's start, and by `reading()`: a connection
        # is then always in the backlog or read, never between the two unseen (a niced thread could
        # be held there past the script's quiet time, and that process's events were lost).
        self._accepting = threading.Lock()
        threading.Thread(target=self._accept, name="tokentop-listen", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                select.select([self.server], [], [], ACCEPT_POLL_S)  # a timeout: a closed socket never wakes a select
                with self._accepting:
                    conn, _ = self.server.accept()
                    conn.setblocking(True)
                    self.connections += 1
                    n = self.connections
                    self.merge.pid[n] = _peer_pid(conn)
                    self.merge.peer_pid = self.merge.peer_pid or self.merge.pid[n]
                    reader = threading.Thread(target=self._read, args=(conn, n), name="tokentop-listen-conn", daemon=True)
                    self.readers = [r for r in self.readers if r.is_alive()] + [reader]
                    reader.start()
            except BlockingIOError:  # nothing waiting yet
                continue
            except (OSError, ValueError):  # closed
                return

    def _read(self, conn: socket.socket, n: int) -> None:
        with conn, conn.makefile("r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    self.merge.take(n, from_json(line))
                except (EventDecodeError, UnknownEventType):  # a newer hook's types, a line torn by a kill mid-write
                    continue
        self.merge.closed(n)

    @property
    def peer_pid(self) -> int | None:
        return self.merge.peer_pid

    def reading(self) -> bool:
        """Whether a process is still connected, or waits to be."""
        with self._accepting:
            waiting = self.server.fileno() >= 0 and select.select([self.server], [], [], 0)[0]
            return bool(waiting) or any(r.is_alive() for r in self.readers)

    def drain(self) -> list[Event]:
        out = []
        while self.events:
            out.append(self.events.popleft())
        return out

    def close(self) -> None:
        self.server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _answers(path: Path) -> bool:
    """Whether a listener is on `path` now."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _peer_pid(conn: socket.socket) -> int | None:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return None
    pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    return pid or None


class OwnLevers:
    """An EventSource for generation tokentop does not drive (a script, a process that calls
    `tokentop.watch`): a key that would change it is answered with why not."""

    kind = "engine"
    live = True
    can_pause = False
    step_mode = False
    done = False
    server_pid: int | None = None
    restartable = False
    who = "the script"  # whose levers they are, in the refusals

    def __init__(self):
        self.answers: list[Event] = []

    def send(self, cmd) -> None:
        match cmd:
            case SetLever(lever=name, value=value):
                self.answers.append(LeverRefused(lever=name, value=value, reason=REFUSED.format(who=self.who, what=name)))
            case Pause() | Resume():
                self.answers.append(LeverRefused(lever="pause", value=isinstance(cmd, Pause), reason=f"{self.who}'s generation cannot be paused from here"))
            case Probe() | Profile() | Confidence(on=True):
                self.answers.append(EngineError(message=f"measured inside tokentop's own engine only, not in {self.who}"))
            case Stop() | Shutdown():
                self.close()

    def pause(self, paused: bool) -> None:
        self.send(Pause() if paused else Resume())

    def advance(self) -> None:
        """Its events come as they are made."""

    def restart(self, levers, first_run_id: int = 1) -> None:
        """Not asked (`restartable`): the code is the user's, and may not be safe to run twice."""

    def number_from(self, first_run_id: int) -> None:
        """Its calls are numbered from 1 by its hook."""

    def close(self) -> None:
        """Nothing of tokentop's to stop."""


class ListenSource(OwnLevers):
    """The app's EventSource for `tokentop listen`."""

    who = "the watched process"

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.listener: Listener | None = None

    def start(self) -> None:
        if self.listener is None:
            self.listener = Listener(self.path)

    @property
    def pid(self) -> int | None:
        return self.listener.peer_pid if self.listener else None

    def alive(self) -> bool:
        return True

    def death(self) -> None:
        """A listener outlives the processes that connect to it."""

    def drain(self) -> list[Event]:
        out, self.answers = self.answers, []
        return out + (self.listener.drain() if self.listener else [])

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
