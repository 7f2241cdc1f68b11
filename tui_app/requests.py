"""What a source's process is asked to do, as typed messages like the events that come back: a run
of a request, a lever set, stop, pause, resume, a new measurement of the memory read rate,
the allocator's history over some runs, a step's anatomy, shut down.

The app, the demo and the headless commands send them; the engine (`Engine.command`) and an
attached server's client (`Servers.command`) each take them in one place. Plain picklable
dataclasses with no torch import: they cross the process boundary as they are.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunRequest:
    prompt: str | None = None
    preset: str = "short"
    prompt_file: str | None = None
    prompt_ids: list[int] | None = None
    max_new_tokens: int = 64
    ignore_eos: bool = False
    truncate: bool = False
    chat: bool = True


@dataclass(frozen=True)
class Run:
    """Generate for this request; a run in flight is stopped first."""

    request: RunRequest


@dataclass(frozen=True)
class SetLever:
    """Set a lever (monitors.events.Levers' field names, and `server` for the attached one runs go to);
    the answer is a LeverChanged or a LeverRefused event."""

    lever: str
    value: object


@dataclass(frozen=True)
class Stop:
    """End the run in flight at the next token boundary."""


@dataclass(frozen=True)
class Pause:
    """Hold the run in flight at the next token boundary, until Resume."""


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Probe:
    """Measure the memory read rate of the current weights again (a phase of its own)."""


@dataclass(frozen=True)
class Confidence:
    """Measure each new token's probability from now (`on`), for the tokens' confidence colouring."""

    on: bool


@dataclass(frozen=True)
class History:
    """Record the CUDA allocator's history from now for `runs` runs, then save it to `path`."""

    path: str
    runs: int = 3


@dataclass(frozen=True)
class Profile:
    """Take the anatomy of the next `steps` decode steps under torch.profiler; the trace to `path`."""

    path: str
    steps: int = 8


@dataclass(frozen=True)
class Shutdown:
    """End the process (after the run in flight stops)."""


Command = Run | SetLever | Stop | Pause | Resume | Probe | Confidence | History | Profile | Shutdown
