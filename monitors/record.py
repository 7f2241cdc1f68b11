"""Recording: every event of a session as JSON lines, and reading it back.

Flush policy. The recorder keeps whole lines in a buffer of its own and hands them to the OS in
one write at the end of every run (and on errors and lever changes), then fsyncs; a run's lines
also go out whenever the buffer holds FLUSH_BYTES, so an idle session's samples stay bounded in
memory. A kill -9 of tokentop therefore loses at most the run in flight, and the file ends on a
whole line: the OS holds what was written even though the process died. A line can still be cut
where a write itself is cut short (a full disk, a power loss between writes and their fsync):
the reader skips a cut last line with a note, and a recorder that appends to that file later
first removes the cut line, so the file reads on past it.

A write that fails (a full disk, an I/O error) stops the recording, not the session: the file
is cut back to the last line written whole, so every run recorded before stays readable, and
`on_stop` is told once, in one line (the TUI's status bar, a headless command's stderr).
A truncated or corrupt file is read up to the bad line, and the error names that line.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from monitors.codec import Event, EventDecodeError, UnknownEventType, from_json, to_json
from monitors.events import EngineError, LeverChanged, RunFinished
from monitors.files import is_full, write_error
from monitors.text import plural

_FLUSH_ON = (RunFinished, EngineError, LeverChanged)
FLUSH_BYTES = 64 * 1024
# to_json writes the type first and run_id second, so run numbers are found without decoding every line.
_RUN_ID = re.compile(rb'^\{"type":"Run(?:Started|Finished)","run_id":(\d+)', re.MULTILINE)


class RecordError(OSError):
    pass


class Recorder:
    def __init__(self, path: str | os.PathLike, on_stop: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.on_stop = on_stop
        self.stopped: str | None = None  # why recording stopped, once a write failed
        self.disk_full = False
        self.last_run: int | None = None  # the last run whose RunFinished is on disk
        self._pending: list[str] = []
        self._pending_chars = 0
        self._finished_pending: int | None = None
        # Opened now, so an unwritable path is refused before a model loads; a session that records
        # nothing (a failed start) removes the empty file on close, or replay would later reject it.
        self._created = not self.path.exists()
        self._written = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
            self.first_run_id = self._resume()
        except OSError as exc:
            raise RecordError(f"cannot write the recording {self.path}: {exc.strerror or exc}") from None
        self._good = os.fstat(self._fd).st_size  # the file's length at its last whole line

    def _resume(self) -> int:
        """Appending to an earlier recording: drop a line cut short when its writer died (it holds
        no whole event), and number runs on from the last one the file holds."""
        assert self._fd is not None
        last, offset, carry = 0, 0, b""
        while block := os.pread(self._fd, 1 << 20, offset):
            offset += len(block)
            lines = carry + block
            end = lines.rfind(b"\n") + 1
            last = max([last, *map(int, _RUN_ID.findall(lines, 0, end))])
            carry = lines[end:]
        if carry:
            os.ftruncate(self._fd, offset - len(carry))
        return last + 1

    def write(self, event: Event) -> None:
        if self._fd is None:
            return
        line = to_json(event) + "\n"
        self._pending.append(line)
        self._pending_chars += len(line)
        if isinstance(event, RunFinished):
            self._finished_pending = event.run_id
        if isinstance(event, _FLUSH_ON):
            self.flush()
        elif self._pending_chars >= FLUSH_BYTES:
            self._write_pending()

    def _write_pending(self) -> bool:
        if self._fd is None or not self._pending:
            return self._fd is not None
        data = "".join(self._pending).encode("utf-8")
        self._pending.clear()
        self._pending_chars = 0
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._stop(exc)
            return False
        self._good += len(data)
        self._written = True
        if self._finished_pending is not None:
            self.last_run, self._finished_pending = self._finished_pending, None
        return True

    def flush(self) -> None:
        if self._write_pending() and self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._stop(exc)

    def _stop(self, exc: OSError) -> None:
        """Recording ends here; the file keeps its whole lines, the session goes on."""
        assert self._fd is not None
        with contextlib.suppress(OSError):  # a write cut short leaves a partial line
            os.ftruncate(self._fd, self._good)
        os.close(self._fd)
        self._fd = None
        self._pending.clear()
        self.disk_full = is_full(exc)
        if self._good == 0 and self._created:
            self.path.unlink(missing_ok=True)
            kept = "nothing was recorded"
        elif self.last_run is not None:
            kept = f"{self.path} keeps every run up to run {self.last_run}"
        else:
            kept = f"{self.path} holds no finished run"
        self.stopped = f"recording stopped: {write_error(exc, self.path)}; {kept}; the session goes on unrecorded"
        if self.on_stop is not None:
            self.on_stop(self.stopped)

    def close(self) -> None:
        if self._fd is None:
            return
        self.flush()
        if self._fd is None:  # the last flush failed: _stop closed it
            return
        os.close(self._fd)
        self._fd = None
        if self._created and not self._written:
            self.path.unlink(missing_ok=True)

    @property
    def kept(self) -> bool:
        """Whether the file holds the recorded events (False once an empty one was removed)."""
        return self._written or not self._created


@dataclass
class Recording:
    events: list[Event]
    error: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # event type → lines left out (skip_unknown)


def read_recording(path: str | os.PathLike, skip_unknown: bool = False) -> Recording:
    """All events up to the first bad line; `error` says which line and why. With `skip_unknown`,
    events of a type this version does not know are counted in `skipped` and reading goes on."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        return Recording([], f"cannot read {p}: {exc.strerror or exc}")
    events: list[Event] = []
    skipped: dict[str, int] = {}
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(from_json(line.decode("utf-8")))
        except (UnicodeDecodeError, EventDecodeError) as exc:
            if skip_unknown and isinstance(exc, UnknownEventType):
                skipped[exc.kind] = skipped.get(exc.kind, 0) + 1
                continue
            before = f"{plural(len(events), 'event')} before it {'was' if len(events) == 1 else 'were'} read"
            if n == len(lines) and events:  # no newline after it: its write was cut short
                return Recording(
                    events, f"{p}: line {n}, the last, was cut short mid-write (tokentop killed, or its disk full) and is skipped; {before}", skipped
                )
            if isinstance(exc, UnicodeDecodeError):
                return Recording(events, f"{p}: line {n} is not UTF-8 text; {before}")
            what = "truncated or corrupt" if events else "not a tokentop recording"
            return Recording(events, f"{p}: line {n} is {what}: {exc}; {before}")
    if not events:
        return Recording([], f"{p} holds no tokentop events", skipped)
    return Recording(events, None, skipped)
