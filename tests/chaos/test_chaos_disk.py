"""A full disk under a session: a real tmpfs of a few kilobytes (tests/helpers/disk.py) that fills
mid-session. One line names the disk as full (the TUI's status bar, a headless command's stderr),
recording stops, the session and its runs go on, every run recorded before stays readable; an
export, a report or a bench table to a full disk says so and leaves no cut file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from monitors.events import RunFinished
from monitors.record import Recorder, read_recording
from tests.helpers.disk import fill, small_disk
from tests.helpers.synthetic import session_events
from tests.ui.test_app import APP_SIZE, finished, notes, status_text, until
from tui_app.attach.client import AttachConfig
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

pytestmark = pytest.mark.chaos
FULL = "is full (No space left on device)"


def tokentop(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui_app", *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def recorded_runs(path) -> list[int]:
    got = read_recording(path)
    assert got.error is None, got.error  # whole lines only: the failed write was cut back
    return [e.run_id for e in got.events if isinstance(e, RunFinished)]


def assert_one_line_said(stderr: str, needle: str) -> None:
    assert "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if needle in line]
    assert len(said) == 1, stderr


def test_run_no_tui_on_a_40k_disk_says_it_is_full_and_runs_on(tmp_path):
    """The case found broken: TOKENTOP_DATA on a 40 KB tmpfs, `run --no-tui --runs 3` ended in a raw
    OSError traceback from Recorder.flush."""
    with small_disk(tmp_path / "data", "40k") as data:
        out = tokentop("run", "--no-tui", "--runs", "3", "--max-new-tokens", "64", env={"TOKENTOP_DATA": str(data)})
        assert_one_line_said(out.stderr, f"recording stopped: the disk holding {data / 'recordings'} {FULL}")
        assert [line.split()[1] for line in out.stdout.splitlines() if line.startswith("run ")] == ["1", "2", "3"]  # the runs went on
        assert out.returncode == 1  # asked to record, it could not record every run
        (path,) = (data / "recordings").glob("*.jsonl")
        runs = recorded_runs(path)
        assert runs and runs == list(range(1, len(runs) + 1)) and len(runs) < 3
        assert f"keeps every run up to run {runs[-1]}" in out.stderr
        stats = tokentop("replay", "--stats", str(path))
        assert stats.returncode == 0 and stats.stderr == "" and len(stats.stdout.splitlines()) == len(runs)


def test_attach_no_tui_on_a_disk_that_fills(llama_server, tmp_path):
    with small_disk(tmp_path / "disk", "24k") as disk:
        out = tokentop("attach", llama_server.url, "--no-tui", "--runs", "8", "--max-new-tokens", "24", "--ignore-eos", "--record", str(disk / "r.jsonl"))
        assert_one_line_said(out.stderr, f"recording stopped: the disk holding {disk} {FULL}")
        assert len([line for line in out.stdout.splitlines() if line.startswith("run ")]) == 8
        assert out.returncode == 1
        runs = recorded_runs(disk / "r.jsonl")
        assert runs == list(range(1, len(runs) + 1)) and 0 < len(runs) < 8


async def test_tui_status_bar_says_the_disk_is_full_runs_go_on_export_says_so(llama_server, tmp_path):
    with small_disk(tmp_path / "disk", "40k") as disk:
        path = disk / "r.jsonl"
        source = AttachSource([AttachConfig(url=llama_server.url)])
        app = TokentopApp(source, RunRequest(max_new_tokens=24, ignore_eos=True), recorder=Recorder(path), fps=8, auto=True, out_dir=str(disk))
        async with app.run_test(size=APP_SIZE) as pilot:
            await until(pilot, lambda: app.session.recorder.stopped, timeout=180, what="the disk to fill")
            assert "rec stopped: disk full" in status_text(app)
            said = [n for n in notes(app) if n.startswith("recording stopped")]
            assert said and said[0].startswith(f"recording stopped: the disk holding {disk} {FULL}")
            at = finished(app)
            await until(pilot, lambda: finished(app) >= at + 2, timeout=60, what="runs after the disk filled")
            assert app.session.fatal is None and "rec stopped: disk full" in status_text(app)
            fill(disk)  # the recorder cut its last write back; now nothing fits
            await pilot.press("e")
            await until(pilot, lambda: any(n.startswith("export not written") for n in notes(app)), what="the export refused")
            assert any(n == f"export not written: the disk holding {disk} {FULL}" for n in notes(app))
            assert sorted(p.name for p in disk.iterdir()) == ["filler", "r.jsonl"]  # no cut export, no temporary file
            await pilot.press("a")
            await pilot.press("q")
        runs = recorded_runs(path)
        assert runs == list(range(1, app.session.recorder.last_run + 1)) and len(runs) < finished(app)
        stats = tokentop("replay", "--stats", str(path))
        assert stats.returncode == 0 and len(stats.stdout.splitlines()) == len(runs)


def test_report_and_bench_tables_to_a_full_disk_say_so_and_leave_no_cut_file(llama_server, tmp_path):
    rec = tmp_path / "s.jsonl"
    recorder = Recorder(rec)
    for ev in session_events(runs=2, tokens=12):
        recorder.write(ev)
    recorder.close()
    with small_disk(tmp_path / "disk", "40k") as disk:
        fill(disk)
        out = tokentop("report", str(rec), "-o", str(disk / "r.html"))
        assert out.returncode == 2
        assert_one_line_said(out.stderr, f"{disk / 'r.html'} not written: the disk holding {disk} {FULL}")
        sweep = ("--lengths", "24:4", "--concurrency", "1", "--repeats", "1", "--warmup", "0")
        out = tokentop("bench", "--endpoint", llama_server.url, *sweep, "-o", "json", "--out", str(disk / "b"))
        assert out.returncode == 1 and "| c1 |" in out.stdout  # the table measured is on stdout
        assert_one_line_said(out.stderr, f"{disk / 'b.json'} not written: the disk holding {disk} {FULL}")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
