"""A user's own script as the app's event source (`tokentop -- python script.py ARGS`): the script
runs unchanged in a child process, with attach/child/ first on its PYTHONPATH (whose sitecustomize
loads attach/script_hook.py) and a pipe's write end left open for the hook's events. The events are
tokentop's own (monitors/events.py): the session, the panes, the recording and the leak detector
take a script's generate() calls as they take the engine's runs.

The script's levers are its own: a key that would switch one is answered with why not, as a
server's are. Its output goes where the command says (the terminal without a TUI, a log file
under the TUI), its exit code is tokentop's, and stopping tokentop stops it (SIGINT first, as
Ctrl-C would, so its own handlers and `finally` blocks run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections import deque
from pathlib import Path

from monitors.codec import Event, EventDecodeError, UnknownEventType, from_json
from monitors.events import EngineError, LeverRefused
from tui_app.process import describe_exit
from tui_app.requests import Confidence, Pause, Probe, Profile, Resume, SetLever, Shutdown, Stop

CHILD = Path(__file__).with_name("child")  # sitecustomize.py alone: nothing of tokentop's shadows the script's imports
FD_ENV = "TOKENTOP_EVENTS_FD"
STOP_S = 5.0  # after SIGINT, how long the script gets to end before SIGTERM, then as long before SIGKILL
REFUSED = "{who} sets its own {what}: change it there"


class ScriptError(Exception):
    """The script could not be started (one line)."""


def read_events(lines, into: deque) -> int:
    """A hook's events, a JSON line each, into `into` until the stream ends: how many lines were
    not events (a newer hook's types, a line torn by a process killed mid-write)."""
    skipped = 0
    for line in lines:
        try:
            into.append(from_json(line))
        except (EventDecodeError, UnknownEventType):
            skipped += 1
    return skipped


class Script:
    """The child process and the thread that reads its events."""

    def __init__(self, argv: list[str], output=None, stdin=None, new_session: bool = False):
        self.argv = argv
        read, write = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHILD), env.get("PYTHONPATH", "")) if p)
        env[FD_ENV] = str(write)
        try:
            self.proc = subprocess.Popen(argv, env=env, pass_fds=(write,), stdin=stdin, stdout=output, stderr=output, start_new_session=new_session)
        except OSError as exc:
            os.close(read)
            raise ScriptError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        finally:
            os.close(write)  # the child's copy alone: its exit ends the reader's file
        self.events: deque[Event] = deque()
        self.skipped = 0  # lines that were not events (a newer hook's types, a torn write)
        self.reader = threading.Thread(target=self._read, args=(read,), name="tokentop-script", daemon=True)
        self.reader.start()

    def _read(self, fd: int) -> None:
        with open(fd, encoding="utf-8", errors="replace") as lines:
            self.skipped = read_events(lines, self.events)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def drain(self) -> list[Event]:
        out = []
        while self.events:
            out.append(self.events.popleft())
        return out

    def wait(self, timeout: float | None = None) -> int:
        """The script's exit code once it has ended and its last events are read (a shell's 128+N for a signal)."""
        code = self.proc.wait(timeout)
        self.reader.join(timeout)
        return 128 - code if code < 0 else code

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
        return self.script.pid if self.script else None

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
