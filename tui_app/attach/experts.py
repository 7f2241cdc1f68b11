"""An attached SGLang's expert load, a run at a time: `attach --expert-dir DIR` starts the server's
expert-distribution recorder before each run and dumps it after (both reset it), then reads the
file the server wrote into DIR (its SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, so this host must
see the server's disk: a local server, or a mounted folder) with monitors/expert_dump.py, and
deletes that file, which only tokentop's request made. The counts are the server's: every
client's requests over the run's span, as the server's GPU counts them all."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx

from monitors.events import EngineError, ExpertLoad
from monitors.expert_dump import DumpError, ExpertDump, read_dump

PREFIX = "expert_distribution_recorder_"
WAIT_S = 5.0  # SGLang writes the file before it answers the dump; a mounted folder may lag


class ServerExperts:
    def __init__(self, http: httpx.AsyncClient, root: str, headers: dict, folder: str, emit):
        self.http, self.root, self.headers, self.folder, self.emit = http, root, headers, Path(folder), emit
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

    async def _post(self, path: str) -> str:
        """ "" once the server took it, else why not: one line."""
        try:
            r = await self.http.post(self.root + path, headers=self.headers, timeout=30.0)
        except httpx.HTTPError as exc:
            return f"POST {path}: {type(exc).__name__}: {exc}"
        if r.status_code != 200:
            return f"POST {path} answered {r.status_code}: is the server started with --expert-distribution-recorder-mode stat?"
        return ""

    async def start(self) -> str:
        self.since_ns = time.time_ns()
        return await self._post("/start_expert_distribution_record")

    async def dump(self) -> ExpertDump:
        """The run's expert load; DumpError says why not."""
        why = await self._post("/dump_expert_distribution_record")
        if why:
            raise DumpError(why)
        deadline = time.monotonic() + WAIT_S
        while (path := self._newest()) is None:
            if time.monotonic() > deadline:
                where = f"no {PREFIX}*.pt appeared in {self.folder} within {WAIT_S:.0f} s of the dump"
                raise DumpError(f"{where}: is it the server's SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR?")
            await asyncio.sleep(0.05)
        try:
            return await asyncio.to_thread(read_dump, str(path))
        finally:
            path.unlink(missing_ok=True)

    def _newest(self) -> Path | None:
        try:
            # a second's slack: a file system's clock of mtimes is coarser than ours
            found = [
                e for e in os.scandir(self.folder) if e.name.startswith(PREFIX) and e.name.endswith(".pt") and e.stat().st_mtime_ns >= self.since_ns - 10**9
            ]
        except OSError:
            return None
        return Path(max(found, key=lambda e: e.stat().st_mtime_ns).path) if found else None
