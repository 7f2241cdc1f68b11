"""The recorder's flush policy and what a crash leaves: whole lines only, a cut last line skipped
with a note, and a later session appended to the same file numbering its runs on from the last."""

from __future__ import annotations

import errno

from monitors.codec import to_json
from monitors.events import RunFinished
from monitors.files import write_error
from monitors.record import FLUSH_BYTES, Recorder, read_recording
from tests.helpers.synthetic import session_events

EVENTS = session_events(runs=3, tokens=10)


def record(path, events) -> Recorder:
    rec = Recorder(path)
    for ev in events:
        rec.write(ev)
    return rec


def test_lines_reach_the_file_whole_and_only_at_a_run_end_or_a_full_buffer(tmp_path):
    path = tmp_path / "s.jsonl"
    first_end = next(i for i, ev in enumerate(EVENTS) if isinstance(ev, RunFinished))
    rec = record(path, EVENTS[:first_end])
    assert path.read_bytes() == b""  # a run in flight is in the recorder's buffer, not half in the file
    rec.write(EVENTS[first_end])
    assert path.read_text() == "".join(to_json(ev) + "\n" for ev in EVENTS[: first_end + 1])
    # An idle session's samples: written whole once the buffer holds FLUSH_BYTES, never cut.
    sample = EVENTS[first_end - 1]
    n = FLUSH_BYTES // len(to_json(sample)) + 2
    for _ in range(n):
        rec.write(sample)
    data = path.read_bytes()
    assert len(data) > FLUSH_BYTES and data.endswith(b"\n")
    rec.close()
    assert len(read_recording(path).events) == first_end + 1 + n


def test_a_cut_last_line_is_skipped_with_a_note(tmp_path):
    path = tmp_path / "s.jsonl"
    record(path, EVENTS).close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])
    got = read_recording(path)
    assert got.events == EVENTS[:-1]
    assert got.error == (
        f"{path}: line {len(EVENTS)}, the last, was cut short mid-write (tokentop killed, or its disk full) and is skipped; "
        f"{len(EVENTS) - 1} events before it were read"
    )


def test_appending_after_a_crash_drops_the_cut_line_and_numbers_runs_on(tmp_path):
    path = tmp_path / "s.jsonl"
    record(path, EVENTS).close()
    path.write_bytes(path.read_bytes() + b'{"type":"Step","run_id":4,"st')  # killed mid-write of run 4
    rec = Recorder(path)
    assert rec.first_run_id == 4  # after the last run the file holds
    assert path.read_bytes().endswith(b"\n")  # the cut line is gone: what follows reads on
    rec.close()
    assert read_recording(path).error is None
    assert Recorder(tmp_path / "new.jsonl").first_run_id == 1


def test_full_disk_message_names_the_folder():
    exc = OSError(errno.ENOSPC, "No space left on device")
    assert write_error(exc, "/data/recordings/r.jsonl") == "the disk holding /data/recordings is full (No space left on device)"
    assert write_error(OSError(errno.EIO, "Input/output error"), "/x/r.jsonl") == "cannot write /x/r.jsonl (Input/output error)"
