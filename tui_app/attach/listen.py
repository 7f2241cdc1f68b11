"""`tokentop listen`: the Unix socket a process that calls `tokentop.watch(model)` sends its events
to (attach/watch.py), and the app's source for them. The socket is in a folder only this user can
enter (0700) and is itself 0600. A connection's events are read by a thread of its own; the last
process to connect is the one the memory pane follows (its pid from the socket's peer credentials,
on Linux). A second `tokentop listen` on the same socket is refused; a socket left by one that died
is replaced.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections import deque
from pathlib import Path

from monitors.codec import Event
from tui_app.attach.script import OwnLevers, read_events


class ListenError(Exception):
    """The socket cannot be made (one line)."""


class Listener:
    def __init__(self, path: Path):
        self.path = path
        self.events: deque[Event] = deque()
        self.peer_pid: int | None = None
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
        threading.Thread(target=self._accept, name="tokentop-listen", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed
                return
            self.connections += 1
            self.peer_pid = _peer_pid(conn) or self.peer_pid
            threading.Thread(target=self._read, args=(conn,), name="tokentop-listen-conn", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="utf-8", errors="replace") as lines:
            read_events(lines, self.events)

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
