"""kill -9 of tokentop itself, mid-run: of the UI (in a real tmux terminal), of the server client
beside a running UI, of a headless command with its engine in process. Every run finished before
reads back with `replay --stats` and `report`, the run cut off is said to be, nothing is left
running, and the next start on the same recording numbers its runs on from the last."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.common.deadline import Deadline
from benchmarks.common.tmux import TmuxApp
from monitors.events import RunFinished, RunStarted
from monitors.record import Recorder, read_recording
from tests.ui.test_app import APP_SIZE, finished, until
from tui_app.attach.client import AttachConfig
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

pytestmark = pytest.mark.chaos


def tokentop(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui_app", *args], capture_output=True, text=True, timeout=timeout)


def finished_in(path) -> list[int]:
    if not path.exists() or not path.stat().st_size:
        return []
    got = read_recording(path)
    assert got.error is None, got.error  # whole lines only, whenever it is read
    return [e.run_id for e in got.events if isinstance(e, RunFinished)]


def wait_for_runs(path, n: int, timeout: float = 120) -> list[int]:
    deadline = Deadline(timeout)
    while not deadline.passed():
        runs = finished_in(path)
        if len(runs) >= n:
            return runs
        time.sleep(0.1)
    raise AssertionError(f"{path}: fewer than {n} runs recorded in {deadline}")


def reads_back(path, runs: list[int]) -> None:
    """`replay --stats` lists each finished run (and one cut off says so); `report` makes its page."""
    stats = tokentop("replay", "--stats", str(path))
    assert stats.returncode == 0 and stats.stderr == "", stats.stderr
    lines = [line for line in stats.stdout.splitlines() if "." not in line.split()[1]]  # runs, not their segments
    assert [int(line.split()[1]) for line in lines if "vs plain greedy:" in line] == runs
    cut = [line for line in lines if "vs plain greedy:" not in line]
    assert all(line.endswith(("ended: did not finish", "ended: the recording ends mid-run")) for line in cut), cut
    report = tokentop("report", str(path), "-o", str(path.with_suffix(".html")))
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr


def next_start_numbers_on(path, url: str, after: int) -> None:
    out = tokentop("attach", url, "--no-tui", "--max-new-tokens", "8", "--record", str(path))
    assert out.returncode == 0, out.stderr
    assert re.search(rf"^run {after + 1} ", out.stdout, re.M), out.stdout
    started = [e.run_id for e in read_recording(path).events if isinstance(e, RunStarted)]
    assert len(started) == len(set(started)) and started[-1] == after + 1  # no run number twice in the file


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_kill_9_of_the_ui_mid_run(llama_server, tmp_path):
    rec = tmp_path / "s.jsonl"
    app = TmuxApp("tt-chaos-kill-ui", ["attach", llama_server.url, "--record", str(rec), "--auto", "--max-new-tokens", "48", "--ignore-eos"])
    try:
        runs = wait_for_runs(rec, 2)
        # Any later run: the recording is a frame behind the screen, and a run of 48 tokens (0.4 s)
        # can end, or never be drawn generating, before the test reads the screen again.
        later = lambda s: any(int(n) > runs[-1] for n in re.findall(r"run (\d+): generating", s))  # noqa: E731
        app.wait_for(later, timeout=30, poll=0.02)
        ui = psutil.Process(app.pid())
        beside = ui.children(recursive=True)  # the server client, multiprocessing's resource tracker
        ui.kill()
        ui.wait(10)
        _, alive = psutil.wait_procs(beside, timeout=5)
        assert not alive, f"left running after the UI was killed: {[p.cmdline() for p in alive]}"
    finally:
        app.close(wait=False)
    runs = finished_in(rec)
    assert runs == list(range(1, len(runs) + 1)) and len(runs) >= 2
    reads_back(rec, runs)
    next_start_numbers_on(rec, llama_server.url, after=max(e.run_id for e in read_recording(rec).events if isinstance(e, RunStarted)))


async def test_kill_9_of_the_server_client_beside_the_ui(llama_server, tmp_path):
    rec = tmp_path / "s.jsonl"
    source = AttachSource([AttachConfig(url=llama_server.url)])
    # Long enough that the kill lands mid-run in the client's own time, not only on the UI's screen:
    # the UI draws what the client sent a frame or more before (seconds on a loaded machine), and
    # llama.cpp makes 48 tokens in 0.4 s: at 48 the client could have ended the run the UI saw streaming.
    app = TokentopApp(source, RunRequest(max_new_tokens=384, ignore_eos=True), recorder=Recorder(rec), fps=8, auto=True, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        streaming = lambda: finished(app) >= 1 and app.session.current.finished is None and app.session.current.total.n_tokens > 2  # noqa: E731
        await until(pilot, streaming, timeout=60, what="run 2 streaming")
        cut = app.session.current.started.run_id
        os.kill(source.proc.pid, signal.SIGKILL)
        await until(pilot, lambda: app.session.fatal is not None, what="the death noticed")
        assert app.state.startswith("server client process died from SIGKILL") and "press R" in app.state
        assert next(r for r in app.session.rows() if r.run_id == cut).note == "engine died"
        await pilot.press("R")
        await until(pilot, lambda: finished(app) >= 2, timeout=60, what="a run after the restart")
        await pilot.press("a")
        assert list(app.session.finished_ids)[:2] == [cut - 1, cut + 1]  # numbers go on past the run cut off
        await pilot.press("q")
    runs = finished_in(rec)
    assert runs[:2] == [cut - 1, cut + 1]
    reads_back(rec, runs)


def test_kill_9_of_a_headless_run_with_its_engine(tmp_path):
    rec = tmp_path / "s.jsonl"
    cmd = [sys.executable, "-m", "tui_app", "run", "--no-tui", "--runs", "50", "--max-new-tokens", "24", "--record", str(rec)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_runs(rec, 2)
        time.sleep(0.3)  # into the next run
    finally:
        proc.kill()
        proc.wait()
    runs = finished_in(rec)
    reads_back(rec, runs)
    out = tokentop("run", "--no-tui", "--max-new-tokens", "8", "--record", str(rec))
    assert out.returncode == 0, out.stderr
    assert re.search(rf"^run {runs[-1] + 1} ", out.stdout, re.M), out.stdout
    assert finished_in(rec) == [*runs, runs[-1] + 1]
