"""A user's own script as the app's event source (`tokentop -- python script.py ARGS`): the script
runs unchanged in a child process, with attach/child/ first on its PYTHONPATH (whose sitecustomize
loads attach/script_hook.py) and the name of a socket of tokentop's (attach/listen.py's Listener, in
a folder only this user can enter) in its environment: the script and every Python process it
starts send their events there. The events are tokentop's own (monitors/events.py): the session,
the panes, the recording and the leak detector take a script's generate() calls as they take the
engine's runs.

The script's levers are its own: a key that would switch one is answered with why not, as a
server's are. Its output goes where the command says (the terminal without a TUI, a log file
under the TUI), its exit code is tokentop's, and stopping tokentop stops it (SIGINT first, as
Ctrl-C would, so its own handlers and `finally` blocks run).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from monitors.codec import Event
from tui_app.attach.hook_writer import FLUSH_S
from tui_app.attach.listen import Listener, ListenError, OwnLevers
from tui_app.process import describe_exit

CHILD = Path(__file__).with_name("child")  # sitecustomize.py alone: nothing of tokentop's shadows the script's imports
SOCKET_ENV = "TOKENTOP_EVENTS_SOCKET"
QUIET_S = 0.05  # how long the script's processes are all gone before their events are taken as read
STOP_S = 5.0  # after SIGINT, how long the script gets to end before SIGTERM, then as long before SIGKILL


class ScriptError(Exception):
    """The script could not be started (one line)."""


class Script:
    """The child process, and the socket its processes' events come in on."""

    def __init__(self, argv: list[str], output=None, stdin=None, new_session: bool = False):
        self.argv = argv
        try:
            self.folder = tempfile.mkdtemp(prefix="tokentop-")  # 0700: only this user reaches the socket
            self.listener = Listener(Path(self.folder) / "events.sock")
        except (OSError, ListenError) as exc:
            raise ScriptError(f"cannot make the socket the script's events come in on: {exc}") from None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHILD), env.get("PYTHONPATH", "")) if p)
        env[SOCKET_ENV] = str(self.listener.path)
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=output, stderr=output, start_new_session=new_session)
        except OSError as exc:
            self._remove()
            raise ScriptError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        self.ended: float | None = None
        self.quiet: float | None = None  # since when no process has been connected, or waiting to be

    @property
    def pid(self) -> int:
        return self.proc.pid

    def drain(self) -> list[Event]:
        return self.listener.drain()

    def finished(self) -> bool:
        """The script has ended and its processes' last events are read: every one of them gone, or
        FLUSH_S passed (a process of its own left running is not waited for)."""
        if self.proc.poll() is None:
            return False
        now = time.monotonic()
        self.ended = self.ended or now
        self.quiet = None if self.listener.reading() else self.quiet or now
        # Quiet a moment, not an instant: a connection accepted is a reader started a few bytecodes later.
        return (self.quiet is not None and now - self.quiet >= QUIET_S) or now - self.ended > FLUSH_S

    def wait(self, timeout: float | None = None) -> int:
        """The script's exit code once it has ended and its last events are read (a shell's 128+N for a signal)."""
        code = self.proc.wait(timeout)
        while not self.finished():
            time.sleep(0.02)
        self._remove()
        return 128 - code if code < 0 else code

    def _remove(self) -> None:
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def stop(self) -> int:
        """SIGINT, as Ctrl-C would; then SIGTERM; then SIGKILL: its exit code."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                continue
        return self.wait()


class ScriptSource(OwnLevers):
    """The app's EventSource for a script, its output into `log_path`."""

    def __init__(self, argv: list[str], log_path: str):
        super().__init__()
        self.argv, self.log_path = argv, log_path
        self.script: Script | None = None
        self._reported = False

    def start(self) -> None:
        if self.script is not None:
            return
        with open(self.log_path, "ab") as log:  # the child holds its own copy of the file
            self.script = Script(self.argv, output=log, stdin=subprocess.DEVNULL, new_session=True)

    @property
    def pid(self) -> int | None:
        """The process whose run the panes show (the script, or one it started)."""
        return (self.script.listener.peer_pid or self.script.pid) if self.script else None

    def alive(self) -> bool:
        return self.script is not None and self.script.proc.poll() is None

    def drain(self) -> list[Event]:
        out, self.answers = self.answers, []
        return out + (self.script.drain() if self.script else [])

    def death(self) -> str | None:
        """Once, when the script has ended: how, and where its output is."""
        if self.script is None or self.alive() or self._reported:
            return None
        self._reported = True
        self.script.wait()
        return f"{describe_exit(self.script.proc.returncode, 'the script')}; its output is in {self.log_path}"

    @property
    def exit_code(self) -> int | None:
        return None if self.script is None or self.alive() else self.script.wait()

    def close(self) -> None:
        if self.script is not None:
            self.script.stop()
