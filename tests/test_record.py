import pytest

from monitors.events import Levers, Phase, RunFinished, RunStarted, Step, to_json
from monitors.record import Recorder, RecordError, read_recording


def _make():
    return [
        Phase("load", "x", True, 1.0),
        RunStarted(1, Levers(), 3, 2, "p"),
        Step(1, 1, "prefill", [5], "a", 1, 10, 5, 4, 100, 100, 4),
        RunFinished(1, 1, "eos", "a", 1, 1, None, None, 12.0, None, "reference"),
    ]


EVENTS = _make()


def _events():
    return list(EVENTS)


def test_record_and_read_back(tmp_path):
    path = tmp_path / "s.jsonl"
    rec = Recorder(path)
    for ev in _events():
        rec.write(ev)
    # flushed at the end of the run, before close: a crash now would lose nothing
    assert len(read_recording(path).events) == 4
    rec.close()
    got = read_recording(path)
    assert got.error is None and got.events == _events()


def test_truncated_recording_names_the_line_and_keeps_what_came_before(tmp_path):
    path = tmp_path / "s.jsonl"
    rec = Recorder(path)
    for ev in _events():
        rec.write(ev)
    rec.close()
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # cut in the middle of the last line
    got = read_recording(path)
    assert len(got.events) == 3 and "line 4" in got.error and "3 events before it" in got.error


def test_garbage_in_the_middle(tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [to_json(e) for e in _events()]
    lines.insert(2, "\x00\x01 binary junk")
    path.write_text("\n".join(lines) + "\n")
    got = read_recording(path)
    assert len(got.events) == 2 and "line 3" in got.error


def test_not_a_recording(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello world\n")
    got = read_recording(path)
    assert got.events == [] and "line 1" in got.error and "not a tokentop recording" in got.error
    assert "cannot read" in read_recording(tmp_path / "missing.jsonl").error


def test_unwritable_record_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecordError, match="cannot write the recording"):
        Recorder(blocker / "sub" / "s.jsonl")
