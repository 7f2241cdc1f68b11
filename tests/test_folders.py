"""Every folder tokentop writes, made unwritable in turn: one line naming the folder and the variable
that moves it (or a fallback that says where it went), never a traceback or a silent slow path.

A folder "below a regular file" is unwritable for every user, root included (permission bits are not)."""

import os
import tempfile
import time

import pytest

from monitors.events import EngineError
from tui_app import folders
from tui_app.engine.generation import EngineConfig
from tui_app.engine.process import EngineProcess


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
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))  # torch's default lives in the temp folder
    notes = folders.check_engine_folders()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    assert len(notes) == 1 and "TORCHINDUCTOR_CACHE_DIR" in notes[0] and str(blocked) in notes[0]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocked))  # set by the user: their choice is not overridden
    with pytest.raises(folders.FolderError, match="TORCHINDUCTOR_CACHE_DIR"):
        folders.check_engine_folders()


def test_unwritable_engine_log_is_an_engine_error_not_a_traceback(blocked):
    proc = EngineProcess(EngineConfig(), str(blocked / "engine.log")).start()
    try:
        end = time.time() + 60
        ev = None
        while time.time() < end and not isinstance(ev, EngineError):
            ev = proc.get(timeout=0.5)
        assert isinstance(ev, EngineError) and ev.fatal
        assert str(blocked / "engine.log") in ev.message and "TOKENTOP_CACHE" in ev.message
        proc.proc.join(10)
        assert proc.exit_info().exitcode == 0
    finally:
        proc.shutdown()
