import pytest

from monitors.codec import to_json
from monitors.events import Levers, Phase, RunFinished, RunStarted, Step
from monitors.record import Recorder, RecordError, read_recording


def _make():
    return [
        Phase(name="load", detail="x", done=True, seconds=1.0),
        RunStarted(run_id=1, levers=Levers(), prompt_tokens=3, max_new_tokens=2, prompt_text="p"),
        Step(
            run_id=1, step=1, kind="prefill", token_ids=[5], text="a", n_tokens=1, t_ns=10, dt_ns=5, forward_ns=4, kv_bytes=100, kv_alloc_bytes=100, seq_len=4
        ),
        RunFinished(
            run_id=1,
            n_tokens=1,
            stop_reason="eos",
            text="a",
            peak_rss=1,
            baseline_rss=1,
            torch_peak=None,
            gpu_baseline=None,
            perplexity=12.0,
            first_diff=None,
            diff_note="reference",
        ),
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
    assert len(got.events) == 3 and "line 4" in got.error and "3 events before it were read" in got.error


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


def test_a_session_that_records_nothing_leaves_no_empty_file(tmp_path):
    """A failed start (a bad --device) recorded no event: a 0-byte file would be rejected by replay."""
    path = tmp_path / "s.jsonl"
    rec = Recorder(path)
    rec.close()
    assert not path.exists() and not rec.kept
    old = tmp_path / "old.jsonl"  # an existing recording appended to is never removed
    old.write_text("")
    rec = Recorder(old)
    rec.close()
    assert old.exists() and rec.kept


def test_tests_record_into_their_own_folder_never_the_users():
    from tests.conftest import TEST_DATA
    from tui_app.core.options import default_record_path

    assert default_record_path().startswith(TEST_DATA + "/")


def test_counts_are_singular_for_one(tmp_path):
    from monitors.leaks import LeakVerdict

    path = tmp_path / "s.jsonl"
    path.write_text(to_json(EVENTS[0]) + "\n{broken\n")
    assert "1 event before it was read" in read_recording(path).error
    assert LeakVerdict("collecting", 0, 0, 0, 1).text() == "leak: collecting (1 run)"


def test_a_failed_start_leaves_no_recording(tmp_path):
    """`--device` wrong: no 0-byte default recording is left behind, which replay would reject."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TOKENTOP_DATA=str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "tui_app", "run", "--no-tui", "--device", "tpu"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert r.returncode == 2 and "--device 'tpu'" in r.stderr
    assert not list(tmp_path.rglob("*.jsonl")) and "recorded to" not in r.stderr
