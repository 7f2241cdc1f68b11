"""Every folder tokentop writes, made unwritable in turn: one line naming the folder and the variable
that moves it (or a fallback that says where it went), never a traceback or a silent slow path.

A folder "below a regular file" is unwritable for every user, root included (permission bits are not)."""

import os
import tempfile

import pytest

from benchmarks.common.deadline import Deadline
from monitors.events import EngineError
from tui_app import folders
from tui_app.engine.generation import EngineConfig
from tui_app.engine.main import engine_main
from tui_app.process import EngineProcess


@pytest.fixture
def blocked(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("")
    return f / "sub"


def test_unwritable_model_cache_is_one_line_naming_the_variable(blocked, monkeypatch):
    monkeypatch.setenv("TOKENTOP_CACHE", str(blocked))
    with pytest.raises(folders.FolderError) as err:
        folders.check_engine_folders()
    assert str(blocked) in str(err.value) and "TOKENTOP_CACHE" in str(err.value) and "\n" not in str(err.value)


def test_unwritable_inductor_folder_falls_back_into_the_cache_or_fails_when_set(blocked, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTOP_CACHE", str(tmp_path / "cache"))
    # Set, then removed: monkeypatch then restores the variable as it was before the test, not the
    # fallback the code sets (left set, every later compile in this process began from an empty cache).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))  # torch's default lives in the temp folder
    notes = folders.check_engine_folders()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    assert len(notes) == 1 and "TORCHINDUCTOR_CACHE_DIR" in notes[0] and str(blocked) in notes[0]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocked))  # set by the user: their choice is not overridden
    with pytest.raises(folders.FolderError, match="TORCHINDUCTOR_CACHE_DIR"):
        folders.check_engine_folders()


def test_unwritable_engine_log_is_an_engine_error_not_a_traceback(blocked):
    proc = EngineProcess(EngineConfig(), str(blocked / "engine.log"), target=engine_main).start()
    try:
        deadline, ev = Deadline(60), None
        while not isinstance(ev, EngineError) and not deadline.passed():
            ev = proc.get(timeout=0.5)
        assert isinstance(ev, EngineError) and ev.fatal
        assert str(blocked / "engine.log") in ev.message and "TOKENTOP_CACHE" in ev.message
        proc.proc.join(10)
        assert proc.exit_info().exitcode == 0
    finally:
        proc.shutdown()


def _cli(*args, env):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "tui_app", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, **env),
        check=False,
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize(
    "args,variable",
    [
        (["run", "--no-tui", "--no-record"], "TOKENTOP_CACHE"),
        (["bench", "--lengths", "8:2"], "TOKENTOP_CACHE"),
        (["leakcheck"], "TOKENTOP_CACHE"),
        (["run", "--no-tui"], "TOKENTOP_DATA"),  # the default recording's folder
    ],
)
def test_every_command_refuses_an_unwritable_folder_in_one_line(blocked, tmp_path, args, variable):
    r = _cli(*args, env={variable: str(blocked), **({"TOKENTOP_CACHE": str(tmp_path / "c")} if variable != "TOKENTOP_CACHE" else {})})
    assert r.returncode == 2 and str(blocked) in r.stderr and variable in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


async def test_export_and_screenshot_into_an_unwritable_folder_say_which_and_what_moves_it(blocked):
    from tests.helpers.synthetic import session_events
    from tui_app.core.sources import ReplaySource
    from tui_app.ui.app import TokentopApp

    app = TokentopApp(ReplaySource(session_events(runs=1, tokens=4), speed=0), None, out_dir=str(blocked))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("e")
        await pilot.press("ctrl+s")
        await pilot.pause()
    errors = [t for t in app.told if str(blocked) in t]
    assert len(errors) == 2 and all("--out-dir" in t for t in errors)


async def test_exports_default_to_the_recordings_folder_with_the_full_path(tmp_path, monkeypatch):
    from tests.helpers.synthetic import session_events
    from tui_app.core.sources import ReplaySource
    from tui_app.ui.app import TokentopApp

    monkeypatch.setenv("TOKENTOP_DATA", str(tmp_path))
    app = TokentopApp(ReplaySource(session_events(runs=1, tokens=4), speed=0), None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("e")
        await pilot.press("ctrl+s")
        await pilot.pause()
    written = sorted(p.name for p in (tmp_path / "recordings").iterdir())
    assert len(written) == 2 and written[0].endswith("-export.json") and written[1].endswith("-screenshot.svg")
    assert all(any(str(tmp_path / "recordings" / name) in t for t in app.told) for name in written)


def test_bench_outputs_into_an_unwritable_folder_are_refused_before_the_sweep(blocked):
    r = _cli("bench", "--lengths", "8:2", "--levers", "plain", "-o", "json", "--out", str(blocked / "x"), env={})
    assert r.returncode == 2 and str(blocked) in r.stderr and "--out" in r.stderr and "runs" not in r.stderr, r.stderr
