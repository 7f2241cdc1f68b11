"""The thread of a watched process (attach/script_hook.py) that sends its events to tokentop: a
socket only this user can open, tokentop's own for a script (attach/script.py) and `tokentop
listen`'s for a notebook (attach/watch.py); attach/listen.py reads both.

Generation never waits on it: the generating thread only puts a stamp in a bounded queue (a full
one drops it and counts the drop); this thread makes the events and sends them. A listener that is
missing is looked for again once a second (the events meanwhile dropped and counted); one that
comes back, or a new one, is sent the model and the run in progress first, so it picks up mid-run.
Loaded in the script's process from this file (attach/child/sitecustomize.py): the standard library
and monitors/ only.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from pathlib import Path

from monitors.codec import to_json
from monitors.events import EngineError, EngineReady, RunFinished, RunStarted

QUEUE_MAX = 1 << 16  # stamps waiting for the writer: minutes of tokens at any rate a script reaches
FLUSH_S = 2.0  # at the process's exit, how long the writer gets to send what is left
RETRY_S = 1.0  # how often a missing listener is looked for


class Writer(threading.Thread):
    """Takes the generating thread's stamps, makes the events, sends them to the socket at `path`."""

    def __init__(self, path: Path):
        super().__init__(name="tokentop-hook", daemon=True)
        self.path = path
        self.stamps: queue.Queue = queue.Queue(QUEUE_MAX)
        self.dropped = 0
        self.sock: socket.socket | None = None
        self.tried = float("-inf")
        self.ready: EngineReady | None = None  # what a listener that connects now is told first
        self.open: RunStarted | None = None

    def put(self, work, *args) -> None:
        try:
            self.stamps.put_nowait((work, args))
        except queue.Full:
            self.dropped += 1

    def run(self) -> None:
        while (item := self.stamps.get()) is not None:
            work, args = item
            try:
                events = work(*args)
            except Exception as exc:  # noqa: BLE001 - what cannot be measured is said, and the process goes on
                events = [EngineError(message=f"watching the script: {type(exc).__name__}: {exc}")]
            for ev in events:
                self.send(ev)

    def send(self, ev) -> None:
        connected = self.sock is not None or self._connect()
        if isinstance(ev, EngineReady):
            self.ready = ev
        elif isinstance(ev, RunStarted):
            self.open = ev
        elif isinstance(ev, RunFinished):
            self.open = None
        if not connected or not self._send(ev):
            self.dropped += 1

    def _send(self, ev) -> bool:
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.sendall((to_json(ev) + "\n").encode())
            return True
        except OSError:  # the listener went away: looked for again in RETRY_S
            sock.close()
            self.sock = None
            return False

    def _connect(self) -> bool:
        now = time.monotonic()
        if now - self.tried < RETRY_S:
            return False
        self.tried = now
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            return False
        self.sock = sock
        return all(self._send(ev) for ev in (self.ready, self.open) if ev is not None)

    def close(self) -> None:
        if self.is_alive():  # at exit, by atexit and by multiprocessing's finalizers alike: once is enough
            self.stamps.put(None)
            self.join(FLUSH_S)
        if self.sock is not None:
            self.sock.close()
