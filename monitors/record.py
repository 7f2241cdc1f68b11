"""Recording: every event of a session as JSON lines, and reading it back.

The file is flushed after every finished run (and on errors and lever changes), so a crash
loses at most the run in flight. A truncated or corrupt file is read up to the bad line, and
the error names that line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from monitors.events import EngineError, Event, EventDecodeError, LeverChanged, RunFinished, UnknownEventType, from_json, to_json
from monitors.text import plural

_FLUSH_ON = (RunFinished, EngineError, LeverChanged)


class RecordError(OSError):
    pass


class Recorder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        # Opened now, so an unwritable path is refused before a model loads; a session that records
        # nothing (a failed start) removes the empty file on close, or replay would later reject it.
        self._created = not self.path.exists()
        self._written = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the session
        except OSError as exc:
            raise RecordError(f"cannot write the recording {self.path}: {exc.strerror or exc}") from None

    def write(self, event: Event) -> None:
        if self._f.closed:
            return
        self._f.write(to_json(event) + "\n")
        self._written = True
        if isinstance(event, _FLUSH_ON):
            self.flush()

    def flush(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self.flush()
            self._f.close()
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
    for n, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            events.append(from_json(line.decode("utf-8")))
        except UnicodeDecodeError:
            return Recording(events, f"{p}: line {n} is not UTF-8 text; {plural(len(events), 'event')} before it {'was' if len(events) == 1 else 'were'} read")
        except EventDecodeError as exc:
            if skip_unknown and isinstance(exc, UnknownEventType):
                skipped[exc.kind] = skipped.get(exc.kind, 0) + 1
                continue
            what = "truncated or corrupt" if events else "not a tokentop recording"
            return Recording(events, f"{p}: line {n} is {what}: {exc}; {plural(len(events), 'event')} before it {'was' if len(events) == 1 else 'were'} read")
    if not events:
        return Recording([], f"{p} holds no tokentop events", skipped)
    return Recording(events, None, skipped)
