"""Where a process is stuck, on request: with TOKENTOP_STACKS naming a folder, SIGUSR1 writes the
stack of every thread of a tokentop process (the UI, the engine, an attach client) to
`<folder>/<pid>.txt`, then every asyncio task's where a loop runs (the UI's). A frozen screen (a
loop blocked on a write or a lock, or an await that never returns while the loop idles) then says
where it is. faulthandler writes the threads from the signal handler itself, in C, so it answers
while the main thread is blocked, where a Python handler would wait for it; the tasks come from a
Python handler it chains to, run by the main thread as soon as it is free (an idle loop at once).
Off unless the variable is set: nothing is registered or opened then."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys

ENV = "TOKENTOP_STACKS"


def on_request() -> None:
    """Once per process, at its start."""
    folder = os.environ.get(ENV)
    if not folder or not hasattr(signal, "SIGUSR1"):  # not set, or no such signal (Windows)
        return
    path = os.path.join(folder, f"{os.getpid()}.txt")
    try:
        out = open(path, "a")  # noqa: SIM115 - faulthandler writes to it for the process's life
    except OSError as exc:
        print(f"tokentop: {ENV}: cannot write {path} ({exc.strerror or exc}); stacks on SIGUSR1 are off", file=sys.stderr)
        return
    signal.signal(signal.SIGUSR1, lambda *_: _tasks(out))
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True, chain=True)


def _tasks(out) -> None:
    try:
        tasks = asyncio.all_tasks()  # the loop this (the main) thread runs
    except RuntimeError:  # none runs here: the threads say it all
        return
    out.write(f"\n{len(tasks)} asyncio tasks, each down to the await it waits on:\n")
    for task in tasks:
        out.write(f"{task.get_name()}\n")
        # A task's own stack stops at its first coroutine; what it waits on is down the awaits.
        coro: object = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                out.write(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    out.flush()
