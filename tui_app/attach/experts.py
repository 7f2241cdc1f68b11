"""An attached server's expert load, a run at a time: `attach --expert-dir DIR` starts the server's
expert-distribution recorder before each run (which resets it) and dumps it after, then reads the
file the server wrote into DIR (its recorder's folder, so this host must see the server's disk: a
local server, or a mounted folder) with monitors/expert_dump.py, and deletes that file, which only
tokentop's request made. SGLang and lmdeploy serve the same two endpoints and write files of their
own (RECORDERS). The counts are the server's: every client's requests over the run's span, as the
server's GPU counts them all."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from monitors.events import EngineError, ExpertLoad
from monitors.expert_dump import DumpError, ExpertDump, read_dump

WAIT_S = 5.0  # a server writes the file before it answers the dump; a mounted folder may lag


@dataclass(frozen=True)
class Recorder:
    prefix: str  # the dump files' names: prefix…suffix
    suffix: str
    folder: str  # the server's setting that names the folder it writes
    switch: str  # how the recorder is turned on, said where the server refuses it


RECORDERS = {
    "SGLang": Recorder(
        "expert_distribution_recorder_", ".pt", "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "started with --expert-distribution-recorder-mode stat"
    ),
    # lmdeploy's pull request #3709: the endpoints of SGLang's names, a file of its own
    "lmdeploy": Recorder(
        "rank",
        "_expert_counts.pt",
        "LMDEPLOY_EXPERT_DUMP_DIR",
        "a build with the expert recorder (lmdeploy #3709), started with LMDEPLOY_DUMP_EXPERT_DISTRIBUTION=1",
    ),
}


class ServerExperts:
    def __init__(self, http: httpx.AsyncClient, root: str, headers: dict, engine: str, folder: str, emit):
        self.http, self.root, self.headers, self.folder, self.emit = http, root, headers, Path(folder), emit
        self.recorder = RECORDERS[engine]
        self.since_ns = 0
        self.off = ""  # why the load is no longer asked for: said once, not at every run

    async def begin(self) -> None:
        if not self.off and (why := await self.start()):
            self._stop(why)

    async def end(self, run_id: int) -> list | None:
        """The run's counts, sent as its ExpertLoad (the expert pane's, as an in-process run's), or None."""
        if self.off:
            return None
        try:
            load = await self.dump()
        except DumpError as exc:
            self._stop(str(exc))
            return None
        self.emit(ExpertLoad(run_id=run_id, steps=load.passes, counts=load.counts, last_hits=load.last_hits))
        return load.counts

    def _stop(self, why: str) -> None:
        self.off = why
        self.emit(EngineError(message=f"expert load: {why}; not asked for again while attached"))

    async def _post(self, path: str) -> tuple[str, httpx.Response | None]:
        """("", the answer) once the server took it, else (why not: one line, None)."""
        try:
            r = await self.http.post(self.root + path, headers=self.headers, timeout=30.0)
        except httpx.HTTPError as exc:
            return f"POST {path}: {type(exc).__name__}: {exc}", None
        if r.status_code != 200:
            return f"POST {path} answered {r.status_code}: is the server {self.recorder.switch}?", None
        return "", r

    async def start(self) -> str:
        self.since_ns = time.time_ns()
        return (await self._post("/start_expert_distribution_record"))[0]

    async def dump(self) -> ExpertDump:
        """The run's expert load; DumpError says why not."""
        why, answer = await self._post("/dump_expert_distribution_record")
        if answer is None:
            raise DumpError(why)
        named = _named(answer)
        if named == []:  # lmdeploy answers 200 with no path where its recorder is off
            raise DumpError(f"the server wrote no dump: is it {self.recorder.switch}?")
        deadline = time.monotonic() + WAIT_S
        while (path := self._newest(named)) is None:
            if time.monotonic() > deadline:
                where = f"no {self.recorder.prefix}*{self.recorder.suffix} appeared in {self.folder} within {WAIT_S:.0f} s of the dump"
                raise DumpError(f"{where}: is it the server's {self.recorder.folder}?")
            await asyncio.sleep(0.05)
        try:
            return await asyncio.to_thread(read_dump, str(path))
        finally:
            path.unlink(missing_ok=True)

    def _newest(self, named: list[str] | None) -> Path | None:
        """The file the dump named (its name: the server's path may not be this host's), else the
        newest of the recorder's since the run began."""
        rec = self.recorder
        try:
            # a second's slack: a file system's clock of mtimes is coarser than ours
            found = [
                e
                for e in os.scandir(self.folder)
                if (e.name in named if named else e.name.startswith(rec.prefix) and e.name.endswith(rec.suffix))
                and e.stat().st_mtime_ns >= self.since_ns - 10**9
            ]
        except OSError:
            return None
        return Path(max(found, key=lambda e: e.stat().st_mtime_ns).path) if found else None


def _named(answer: httpx.Response) -> list[str] | None:
    """The file names a JSON answer's `filepaths` gives (lmdeploy's: a path, or one a rank, None on
    the ranks that write none); None where the answer names none (SGLang's line of text)."""
    try:
        paths = answer.json().get("filepaths", ...)
    except (ValueError, AttributeError):
        return None
    if paths is ...:
        return None
    paths = paths if isinstance(paths, list) else [paths]
    return [os.path.basename(p) for p in paths if isinstance(p, str) and p]
