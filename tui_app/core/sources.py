"""Where the app's events come from: a live engine process, an attached server's client process,
or a recording being replayed. The app knows a source only through EventSource."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from monitors.codec import Event
from monitors.events import EngineError, EngineReady, FleetReady, Levers, Step
from tui_app.requests import Command, Pause, Resume


class EventSource(Protocol):
    """What the app drains once a frame and sends its keys' commands to."""

    kind: str  # "engine", "server" or "fleet": what the KV pane and the status line show
    live: bool  # whether commands reach something that generates (a replay's levers are recorded)
    can_pause: bool  # False: Pause is answered with why not (a server's stream goes on)
    step_mode: bool  # a replay released a step per key (advance) instead of on its schedule
    server_pid: int | None  # the attached server's own process, when it runs on this host
    restartable: bool  # R starts its process again (not a user's script: it may not be safe to run twice)

    @property
    def pid(self) -> int | None:
        """The process the memory pane and the leak detector follow."""

    @property
    def done(self) -> bool:
        """Nothing more will come (a replay played to its end)."""

    def start(self) -> None: ...

    def drain(self) -> list[Event]:
        """The events since the last call."""

    def death(self) -> str | None:
        """Once, when the process behind the source has died unasked: what happened."""

    def alive(self) -> bool: ...

    def send(self, cmd: Command) -> None: ...

    def pause(self, paused: bool) -> None: ...

    def advance(self) -> None: ...

    def restart(self, levers: Levers, first_run_id: int = 1) -> None:
        """A new process with these levers, numbering its runs from `first_run_id`."""

    def close(self) -> None: ...


class LiveSource:
    """The engine's process (or, as AttachSource, an attached server's client): commands in, events out."""

    live = True
    kind = "engine"
    can_pause = True
    step_mode = False
    done = False
    server_pid: int | None = None
    restartable = True

    def __init__(self, config, log_path: str | None = None, *, target):
        """`target`: what the process runs (the engine's `tui_app.engine.main.engine_main`); handed
        in by the command that starts it, so that nothing here reaches torch."""
        self.config = config
        self.log_path = log_path
        self.target = target
        self.proc = None
        self._reported_death = False

    def _process(self):
        from tui_app.process import EngineProcess

        return EngineProcess(self.config, self.log_path, target=self.target, what="engine" if self.kind == "engine" else "server client")

    def start(self) -> None:
        """Idempotent: the CLI starts the engine before importing Textual, so both load at once."""
        if self.proc is not None and self.proc.alive():
            return
        self.proc = self._process().start()
        self._reported_death = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def restart(self, levers, first_run_id: int = 1) -> None:
        self.close()
        self.proc = None
        self.config = replace(self.config, levers=levers, first_run_id=first_run_id)
        self.start()

    def number_from(self, first_run_id: int) -> None:
        """Before start: the runs numbered on from an earlier recording's last (one appended to)."""
        self.config = replace(self.config, first_run_id=first_run_id)

    def drain(self) -> list[Event]:
        return self.proc.drain() if self.proc else []

    def death(self) -> str | None:
        """Once, when the engine process has died unasked: what happened."""
        if self.proc is None or self.proc.alive() or self._reported_death:
            return None
        self._reported_death = True
        return self.proc.exit_info().message

    def send(self, cmd: Command) -> None:
        if self.proc is not None and self.proc.alive():
            self.proc.send(cmd)

    def pause(self, paused: bool) -> None:
        self.send(Pause() if paused else Resume())

    def advance(self) -> None:
        """Nothing held back to release: a live source's events come as they are made."""

    def close(self) -> None:
        if self.proc is not None:
            self.proc.shutdown()


class AttachSource(LiveSource):
    """Attached servers (a list of client configurations, one per server): their client runs in a
    process of its own, like the engine. `pid` is the active server's own process when it runs on
    this host (for the memory pane and the leak detector), known once the client has connected."""

    kind = "server"
    can_pause = False

    def __init__(self, config, log_path: str | None = None, target=None):
        from tui_app.attach.loop import client_main

        super().__init__(config, log_path, target=target or client_main)
        self.server_pid: int | None = None

    @property
    def pid(self) -> int | None:
        return self.server_pid

    def restart(self, levers, first_run_id: int = 1) -> None:
        self.close()
        self.proc = None
        self.config = [replace(c, concurrency=levers.batch, first_run_id=first_run_id) for c in self.config]
        self.start()

    def number_from(self, first_run_id: int) -> None:
        self.config = [replace(c, first_run_id=first_run_id) for c in self.config]


class FleetSource(AttachSource):
    """A fleet through Prometheus (tui_app/attach/fleet.py), with tokentop's own runs to one of its
    replicas unless it only watches: the watcher and the runs' client share a process of their own."""

    kind = "fleet"

    def __init__(self, config, log_path: str | None = None):
        from tui_app.attach.fleet import fleet_main

        super().__init__(config, log_path, target=fleet_main)

    def restart(self, levers, first_run_id: int = 1) -> None:
        self.close()
        self.proc = None
        runs = [replace(c, concurrency=levers.batch) for c in self.config.runs]
        self.config = replace(self.config, runs=runs, first_run_id=first_run_id)
        self.start()

    def number_from(self, first_run_id: int) -> None:
        self.config = replace(self.config, first_run_id=first_run_id)


class ReplaySource:
    """Releases a recording's events on their original schedule (× speed), or one step per advance()."""

    live = False
    restartable = False
    pid = None
    server_pid = None
    can_pause = True

    def __init__(self, events: list[Event], speed: float = 1.0, step_mode: bool = False, error: str | None = None):
        self.events = events
        self.speed = speed
        self.step_mode = step_mode
        self.error = error
        self.pos = 0
        self.t0_event = next((getattr(e, "t_ns", 0) for e in events), 0)
        self.t0_wall = None
        self.paused_at = None
        self._steps_allowed = 0
        ready = next((e for e in events if isinstance(e, EngineReady)), None)
        self.kind = "server" if ready is not None and ready.server else "engine"
        if any(isinstance(e, FleetReady) for e in events):
            self.kind = "fleet"

    def start(self) -> None:
        self.t0_wall = time.monotonic()

    def advance(self) -> None:
        self._steps_allowed += 1

    def pause(self, paused: bool) -> None:
        now = time.monotonic()
        if paused:
            self.paused_at = now
        elif self.paused_at is not None:
            self.t0_wall += now - self.paused_at
            self.paused_at = None

    def drain(self) -> list[Event]:
        out: list[Event] = []
        if self.t0_wall is None or self.paused_at is not None:
            return out
        elapsed_ns = (time.monotonic() - self.t0_wall) * 1e9 * (self.speed if self.speed > 0 else 1e12)
        while self.pos < len(self.events):
            ev = self.events[self.pos]
            if self.step_mode:
                if isinstance(ev, Step):
                    if self._steps_allowed <= 0:
                        break
                    self._steps_allowed -= 1
            elif getattr(ev, "t_ns", 0) - self.t0_event > elapsed_ns:
                break
            out.append(ev)
            self.pos += 1
        if self.pos >= len(self.events) and self.error:
            out.append(EngineError(message=self.error))
            self.error = None
        return out

    @property
    def done(self) -> bool:
        return self.pos >= len(self.events)

    def death(self) -> None:
        return None

    def alive(self) -> bool:
        return not self.done

    def send(self, cmd: Command) -> None:
        pass

    def restart(self, levers, first_run_id: int = 1) -> None:
        pass

    def close(self) -> None:
        pass
