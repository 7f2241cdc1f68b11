"""The app in real terminals: tmux and GNU screen between it and the terminal (the mouse wheel and a
resize pass through them), --ascii drawn by a real terminal, and one clear line where there is
no terminal to draw on (TERM=dumb, a pipe).

The outer tmux stands for the user's terminal emulator: keys and mouse reports typed into it
reach the multiplexer inside, as a terminal's would. Each test runs its own tmux server.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.common import ROOT
from benchmarks.common.deadline import Deadline
from benchmarks.common.tmux import TmuxApp
from monitors.record import Recorder
from tests.helpers.synthetic import session_events

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
WHEEL_UP, WHEEL_DOWN = 64, 65  # SGR mouse (1006) button codes
BOX = re.compile(r"[\u2500-\u257f\u2800-\u28ff■…]")


@pytest.fixture(autouse=True)
def tmux_server(tmp_path, monkeypatch):
    """A tmux server of each test's own: sizes and options other tmux users set do not reach it."""
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))


@pytest.fixture
def many_runs(tmp_path):
    """A recording with more runs than the runs table shows at once."""
    path = tmp_path / "runs.jsonl"
    rec = Recorder(str(path))
    for ev in session_events(runs=8, tokens=20):
        rec.write(ev)
    rec.close()
    return str(path)


def _replay(path: str) -> str:
    return f"cd {shlex.quote(ROOT)} && {shlex.join([sys.executable, '-m', 'tui_app', 'replay', path, '--speed', '0'])}"


def _inside(multiplexer: str, cmd: str, socket: str) -> str:
    """`cmd` run inside tmux or screen, started in the outer terminal, mouse reports on."""
    if multiplexer == "tmux":
        return f"TMUX= tmux -L {socket} -f /dev/null new-session {shlex.quote(cmd)} \\; set -g mouse on \\; set -g status off"
    return f"screen -S {socket} -c /dev/null {shlex.join(['sh', '-c', cmd])}"


def _mouse(app: TmuxApp, button: int, x: int, y: int) -> None:
    """A mouse report as a terminal sends it (SGR, 1-based), typed into the outer terminal."""
    subprocess.run(["tmux", "send-keys", "-t", app.name, "-l", f"\x1b[<{button};{x};{y}M"], check=True)


def _left_behind(marker: str, timeout: float = 10.0) -> list[str]:
    """The processes whose command line names `marker` still running after `timeout` (killed then)."""
    deadline = Deadline(timeout)
    while True:
        procs = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]
        if not procs or deadline.passed():
            break
        time.sleep(0.2)
    for p in procs:
        p.kill()
    return [" ".join(p.info["cmdline"]) for p in procs]


def _row_of(screen: str, text: str) -> int:
    return next(i for i, line in enumerate(screen.splitlines()) if text in line)


@pytest.mark.parametrize("multiplexer", ["tmux", "screen"])
def test_mouse_wheel_and_resize_pass_through(multiplexer, many_runs):
    if shutil.which(multiplexer) is None:
        pytest.skip(f"needs {multiplexer} (make sshd installs screen where apt-get and root are at hand)")
    outer = TmuxApp(f"tt-{multiplexer}", [], width=160, height=45, wrap=lambda _: _inside(multiplexer, _replay(many_runs), f"tt-in-{multiplexer}"))
    try:
        # tmux sizes its window once its client is attached, after the app started: it follows
        screen = outer.wait_for(lambda s: "replay finished" in s and "KV cache" in s, timeout=60) and outer.pane()
        row = _row_of(screen, "╭─ runs") + 3  # a line inside the runs table
        _mouse(outer, WHEEL_UP, 40, row + 1)
        outer.wait_for(lambda s: re.search(r"runs · \d+ newer below", s) is not None, timeout=10)
        _mouse(outer, WHEEL_DOWN, 40, row + 1)
        outer.wait_for(lambda s: "newer below" not in s and "╭─ runs ─" in s, timeout=10)
        assert "v view" not in outer.pane(), "160x45 is the wide layout"
        subprocess.run(["tmux", "resize-window", "-t", outer.name, "-x", "100", "-y", "30"], check=True)
        outer.wait_for(lambda s: "v view" in s and "KV cache" not in s, timeout=10)  # narrow: one chart at a time
        subprocess.run(["tmux", "resize-window", "-t", outer.name, "-x", "160", "-y", "45"], check=True)
        outer.wait_for(lambda s: "v view" not in s and "KV cache" in s, timeout=10)
    finally:
        outer.keys("q")
        outer.close(wait=False)
        subprocess.run(["tmux", "-L", f"tt-in-{multiplexer}", "kill-server"], capture_output=True)
        subprocess.run(["screen", "-S", f"tt-in-{multiplexer}", "-X", "quit"], capture_output=True)
    # Its terminal closed as it quit: the app ends all the same, not spinning on the closed terminal.
    left = _left_behind(many_runs)
    assert not left, left


def test_ascii_draws_plain_ascii_in_a_real_terminal(many_runs):
    app = TmuxApp("tt-ascii", ["replay", many_runs, "--speed", "0", "--ascii"])
    try:
        screen = app.wait_for(lambda s: "replay finished" in s, timeout=60) and app.pane()
        assert "+- runs" in screen or "+-runs" in screen.replace(" ", ""), screen
        assert not BOX.search(screen), BOX.findall(screen)
    finally:
        app.close()


@pytest.mark.parametrize("command", ["run", "replay"])
def test_term_dumb_says_to_use_the_numbers(command, many_runs):
    app = TmuxApp("tt-dumb", ["run", "--no-record"] if command == "run" else ["replay", many_runs], env={"TERM": "dumb"})
    try:
        screen = app.wait_for(lambda s: "TOKENTOP-EXIT=" in s, timeout=60) and app.pane()
        said = [line for line in screen.splitlines() if line.startswith("tokentop:")]
        assert len(said) == 1 and "TERM=dumb" in said[0] and ("--no-tui" in said[0] or "--stats" in said[0]), screen
        assert "TOKENTOP-EXIT=2" in screen
    finally:
        app.close(wait=False)
