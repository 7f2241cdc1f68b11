"""Where a process is stuck, on request: with TOKENTOP_STACKS naming a folder, SIGUSR1 writes the
stack of every thread of a tokentop process (the UI, the engine, an attach client) to
`<folder>/<pid>.txt`. A frozen screen (a loop blocked on a write or a lock) then says where it is.
faulthandler writes from the signal handler itself, in C, so it answers while the main thread is
blocked, where a Python handler would wait for it. Off unless the variable is set: nothing is
registered or opened then."""

from __future__ import annotations

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
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)
