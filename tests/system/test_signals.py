"""Signals and keys that end the app at every phase: clean exit, terminal restored, recording intact,
engine process gone. The app runs in a real (tmux) terminal here."""

import fcntl
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time

import psutil
import pytest

from benchmarks.common.tmux import TmuxApp
from monitors.codec import to_json
from monitors.events import Phase
from monitors.record import read_recording

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _engine_of(ui_pid):
    return [p for p in psutil.Process(ui_pid).children(recursive=True) if "multiprocessing" in " ".join(p.cmdline())]


def _began(rec, phase: str) -> bool:
    return any(isinstance(ev, Phase) and ev.name == phase for ev in read_recording(rec).events)


def _stop(app, how):
    if how == "ctrl+c":
        app.keys("C-c")
    else:
        os.kill(app.pid(), {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}[how])


@pytest.mark.parametrize(
    "phase,how",
    [
        ("load", "SIGTERM"),
        ("generate", "SIGTERM"),
        ("generate", "SIGHUP"),
        ("generate", "ctrl+c"),
        ("quantize", "ctrl+c"),
        ("compile", "SIGTERM"),
    ],
)
def test_ending_the_app_at_any_phase(tmp_path, phase, how):
    rec = tmp_path / "s.jsonl"
    app = TmuxApp(f"tt-sig-{phase}-{how}".replace("+", ""), ["--record", str(rec), "--max-new-tokens", "400", "--ignore-eos"])
    try:
        if phase == "load":
            app.wait_for(lambda s: "starting engine" in s or "load" in s, timeout=60)
        else:
            app.wait_for(lambda s: re.search(r"TTFT \d+ ms", s), timeout=120)
            if phase in ("quantize", "compile"):
                # Its phase on the screen ("quantize: …"; "c:compile…" is the key's own echo), or in
                # the recording where a loaded machine's frames skipped a short phase: drawn or
                # not, the engine is in it or has just left it.
                app.keys({"quantize": "w", "compile": "c"}[phase])
                app.wait_for(lambda s: f"{phase}: " in s or _began(rec, phase), timeout=60, poll=0.05)
        ui = app.pid()
        engines = _engine_of(ui)
        _stop(app, how)
        app.wait_for(lambda s: "TOKENTOP-EXIT=" in s, timeout=30)
        screen = app.pane()
        assert "Traceback" not in screen
        code = int(re.search(r"TOKENTOP-EXIT=(\d+)", screen).group(1))
        assert code in (0, 1, 130, 143), screen
        assert "? help  q quit" not in screen  # the key bar (alternate screen) is gone: the terminal is restored
        # An engine the app could not join within its grace ends by its own watch on the app (a 0.5 s
        # poll): gone within seconds, where one left behind would still run after ten.
        _, alive = psutil.wait_procs(engines, timeout=10)
        assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "engine process left behind"
        got = read_recording(rec)
        assert got.error is None or not rec.stat().st_size, got.error  # whatever was written reads back cleanly
    finally:
        app.close()


def test_sigusr1_says_where_every_thread_of_the_app_and_its_engine_is():
    """TOKENTOP_STACKS (tui_app/stacks.py): what a wait on a screen that stopped changing prints
    (TmuxApp.where). The UI's threads and its loop's tasks and the engine's threads, each process in
    a file of its own, and the app goes on as before."""
    app = TmuxApp("tt-sig-usr1", ["--no-record", "--max-new-tokens", "400", "--ignore-eos"])
    try:
        app.wait_for(lambda s: re.search(r"TTFT \d+ ms", s), timeout=120)
        ui = app.pid()
        [engine] = [p.pid for p in _engine_of(ui) if "spawn_main" in " ".join(p.cmdline())]  # not the resource tracker
        where = app.where()
        parts = dict(re.findall(r"--- every thread of pid (\d+) ---\n(.*?)(?=\n--- every thread|\Z)", where, re.S))
        assert {str(ui), str(engine)} <= parts.keys(), where
        assert "textual" in parts[str(ui)] and "monitors/sampler.py" in parts[str(ui)], parts[str(ui)]  # the loop, and the sampler's thread
        # The loop's tasks down to their awaits: an idle loop whose app draws nothing says which await holds it
        tasks = parts[str(ui)].split("asyncio tasks, each down to the await it waits on:\n", 1)[-1]
        assert re.search(r"in run_app\n(  .*\n)*?  \S+textual/message_pump\.py:\d+ in _get_message\n", tasks), parts[str(ui)]  # the app's, idle
        assert "asyncio tasks" not in parts[str(engine)]  # no loop runs there
        assert "tui_app/engine" in parts[str(engine)], parts[str(engine)]
        tokens = app.wait_for(lambda s: "TOKENTOP-EXIT=" in s or re.search(r"ITL p50", s), timeout=10)
        assert tokens and "TOKENTOP-EXIT=" not in app.pane()  # still running
    finally:
        app.close()
    assert not os.path.exists(app.stacks)


def test_an_unwritable_stacks_folder_is_one_line_and_the_command_goes_on(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = dict(os.environ, TOKENTOP_STACKS=str(blocker))
    r = subprocess.run([sys.executable, "-m", "tui_app", "probe"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"tokentop: TOKENTOP_STACKS: cannot write {blocker}/") and line.endswith("(Not a directory); stacks on SIGUSR1 are off"), r.stderr


def test_a_terminal_that_closes_while_the_app_quits_leaves_no_process_behind():
    """q, then the terminal gone before the quit is through (an SSH drop, a closed tab): the app
    must still end; Textual's input thread, spinning on the closed terminal, kept it alive at 30-45 % CPU."""
    app = TmuxApp("tt-sig-quit-hup", ["--no-record", "--max-new-tokens", "400", "--ignore-eos"])
    try:
        app.wait_for(lambda s: re.search(r"TTFT \d+ ms", s), timeout=120)
        ui = psutil.Process(app.pid())
        processes = [ui, *_engine_of(ui.pid)]
        app.keys("q")
        time.sleep(0.3)
    finally:
        app.close(wait=False)
    _, alive = psutil.wait_procs(processes, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "left behind after its terminal closed"


def test_a_terminal_that_reads_no_more_cannot_keep_the_app_from_ending(tmp_path):
    """A frozen SSH link: the terminal takes no more output, so Textual's writer blocks, then its
    queue fills and the app's loop blocks on it; SIGHUP (or SIGTERM) must still end the process.
    The loop's own signal handler never ran there, and Textual's shutdown blocks on the same write:
    the app outlived its terminal for hours."""
    from tests.helpers.synthetic import session_events
    from tui_app.ui.frames import EXIT_GRACE_S

    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(to_json(e) + "\n" for e in session_events(runs=3)))
    leader, follower = os.openpty()
    # A large window: a frame is more than the terminal's buffer holds.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 120, 400, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor")
    argv = [sys.executable, "-m", "tui_app", "replay", str(rec)]
    app = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env, start_new_session=True)
    os.close(follower)
    try:
        unread = b"\0" * 4
        for _ in range(100):  # until the terminal holds all it can and the app's writes wait
            time.sleep(0.1)
            unread = fcntl.ioctl(leader, termios.FIONREAD, unread)
            if struct.unpack("i", unread)[0] >= 4095:
                break
        time.sleep(2)  # the loop then fills Textual's queue of writes and blocks on it
        assert app.poll() is None
        os.kill(app.pid, signal.SIGHUP)
        code = app.wait(timeout=EXIT_GRACE_S + 20)
        assert code in (0, 128 + signal.SIGHUP)
    finally:
        if app.poll() is None:
            app.kill()
        os.close(leader)
