"""`tokentop.watch(model, tokenizer)`: a notebook's (or any process's) generation sent to a
`tokentop listen` running in a terminal, over a Unix socket in tokentop's cache folder that only
this user can open (attach/listen.py makes it).

The same hook as a watched script's (attach/script_hook.py: generate() and loops over model(...)),
with its events sent to the socket instead of a pipe. Generation never waits on the listener: the
hook's own thread sends, and a listener that is missing, slow or gone costs the generating thread
nothing but a stamp in a bounded queue. A missing listener is looked for again once a second (the
events meanwhile are dropped and counted); one that comes back, or a new one, is sent the model and
the run in progress first, so it picks up mid-run.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import time
import weakref
from pathlib import Path

from monitors.codec import to_json
from monitors.events import EngineReady, RunFinished, RunStarted
from tui_app.attach.script_hook import Hook, Writer

RETRY_S = 1.0  # how often a missing listener is looked for
_hook: Hook | None = None
_watched: weakref.WeakSet = weakref.WeakSet()


def socket_path() -> Path:
    """Where `tokentop listen` listens: TOKENTOP_LISTEN, else listen/tokentop.sock in the cache folder."""
    from tui_app.folders import cache_root

    return Path(os.environ.get("TOKENTOP_LISTEN") or cache_root() / "listen" / "tokentop.sock")


class SocketWriter(Writer):
    """The hook's thread, sending to the listener's socket, connecting again when it can."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.sock: socket.socket | None = None
        self.tried = float("-inf")
        self.ready: EngineReady | None = None  # what a listener that connects now is told first
        self.open: RunStarted | None = None

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
        super().close()
        if self.sock is not None:
            self.sock.close()


def watch(model, tokenizer=None) -> None:
    """Send this model's generation (its generate() calls and forwards of loops over it) to
    `tokentop listen`; `tokenizer` detokenizes (by default the tokenizer made last)."""
    global _hook
    if _hook is None:
        _hook = Hook(SocketWriter(socket_path()))
        _hook.writer.start()
        atexit.register(_hook.close)
    if tokenizer is not None:
        _hook.latest = weakref.ref(tokenizer)
    if model in _watched:
        return
    _watched.add(model)
    model.generate = functools.partial(_hook.generate, type(model).generate, model)
    model.register_forward_pre_hook(_hook.loop.pre, with_kwargs=True)
    model.register_forward_hook(_hook.loop.post, with_kwargs=True)
