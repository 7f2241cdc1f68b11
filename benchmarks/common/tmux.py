"""Drive the real app in a detached tmux session, as a user's terminal would show it."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.common import ROOT
from benchmarks.common.deadline import Deadline
from tui_app import stacks

TOKENTOP = [sys.executable, "-m", "tui_app"]


class TmuxApp:
    def __init__(self, name: str, args: list[str], width: int = 160, height: int = 45, env: dict | None = None, python: str = sys.executable, wrap=None):
        """python: the interpreter to run tokentop with (another install's); wrap: turns the command
        line into the one the terminal runs (an `ssh -t host '...'` around it)."""
        self.name = name
        self.stacks = tempfile.mkdtemp(prefix="tokentop-stacks-")  # where a wait that fails asks the app where it is
        # tmux starts the command with its server's environment, not this process's: tokentop's own
        # folders (a test's TOKENTOP_DATA above all) are passed on, or a test would write the user's.
        env = {**{k: v for k, v in os.environ.items() if k.startswith("TOKENTOP_")}, stacks.ENV: self.stacks, **(env or {})}
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The pane outlives the app, so its exit status and the restored terminal can be read.
        # Another install's interpreter starts away from the checkout, so it imports only what it installed.
        python = os.path.abspath(python)
        where = ROOT if python == os.path.abspath(sys.executable) else os.path.dirname(os.path.dirname(python))
        cmd = f"cd {shlex.quote(where)} && {envs} {shlex.join([python, *TOKENTOP[1:], *args])}"
        cmd = f"{wrap(cmd) if wrap else cmd}; echo TOKENTOP-EXIT=$?; sleep 60"
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        self.t0 = time.perf_counter()
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), cmd], check=True)

    def pane(self) -> str:
        r = subprocess.run(["tmux", "capture-pane", "-t", self.name, "-p"], capture_output=True, text=True)
        return r.stdout

    def pid(self) -> int:
        """The app's (UI) process: the child of the pane's shell that runs tui_app."""
        import psutil

        r = subprocess.run(["tmux", "list-panes", "-t", self.name, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True)
        shell = psutil.Process(int(r.stdout.split()[0]))
        for p in [shell, *shell.children(recursive=True)]:
            try:
                if p.cmdline()[1:3] == ["-m", "tui_app"]:  # not the shell around it, nor the engine
                    return p.pid
            except psutil.Error:  # a child that came and went (a compiler the engine ran) is not the app
                continue
        raise LookupError(f"tmux {self.name}: the app is not running; screen:\n{self.pane()}")

    def wait_for(self, predicate, timeout: float, poll: float = 0.05) -> float:
        """Seconds since the start when the screen met the condition; `timeout` counts the time this
        process looked (benchmarks/common/deadline.py): a VM paused past it had the app paused too."""
        met, deadline = self._look(predicate, timeout, poll)
        if met is not None:
            return met
        raise TimeoutError(f"tmux {self.name}: condition not met in {deadline}; screen:\n{self.pane()}{self.where()}")

    def _look(self, predicate, timeout: float, poll: float) -> tuple[float | None, Deadline]:
        deadline = Deadline(timeout)
        while True:
            if predicate(self.pane()):
                return time.perf_counter() - self.t0, deadline
            if deadline.passed():
                return None, deadline
            time.sleep(poll)

    def where(self) -> str:
        """Every thread's stack in the app's processes (tui_app/stacks.py), as they are now: what a
        screen that stopped changing was waiting on. Only a process that registered for it (its file
        is there) is asked: SIGUSR1 would end any other (a compiler the engine ran)."""
        import psutil

        try:
            app = psutil.Process(self.pid())
            procs = [app, *app.children(recursive=True)]
        except (LookupError, psutil.Error):
            return ""
        files = {p.pid: os.path.join(self.stacks, f"{p.pid}.txt") for p in procs}
        asked = [p for p in procs if os.path.exists(files[p.pid])]
        for p in asked:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGUSR1)
        time.sleep(1.0)  # written from the signal handler, at once, unless the process is stopped
        out = []
        for p in asked:
            with open(files[p.pid]) as f:
                out.append(f"\n--- every thread of pid {p.pid} ---\n{f.read()}")
        return "".join(out)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], capture_output=True)

    def close(self, wait: bool = True) -> None:
        """q, and once the app has exited (up to 10 s: its quit took 1.5-2 s on a slow VM hour), the
        terminal closed; with wait=False the terminal is closed at once, whatever the app is doing."""
        if wait:
            self.keys("q")
            # An app still running after 10 s is ended by the terminal's closing (SIGHUP): asking it
            # where it was would cost a second for a message no one reads.
            self._look(lambda s: "TOKENTOP-EXIT=" in s, timeout=10, poll=0.05)
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)
        shutil.rmtree(self.stacks, ignore_errors=True)


def runs_finished(screen: str) -> int:
    """How many runs the status bar says have finished ("run 4 done", or "run 5: generating"): by
    number, not by one status, which a small model's runs of a tenth of a second show between polls."""
    done = [int(n) for n in re.findall(r"\brun (\d+) done\b", screen)]
    started = [int(n) - 1 for n in re.findall(r"\brun (\d+): ", screen)]
    return max(done + started, default=0)
