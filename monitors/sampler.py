"""A sampling thread at a fixed rate, writing into bounded ring buffers.

Readers (the TUI's charts) take snapshots under a lock; the buffers never grow past `history`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from monitors.gpu import GpuReading, NvmlReader
from monitors.system import ProcessSample, ProcessWatcher, SystemSample, SystemWatcher


@dataclass
class Sample:
    t: float
    processes: dict[str, ProcessSample]
    system: SystemSample
    gpu: GpuReading
    sample_cost_s: float = 0.0
    extra: dict = field(default_factory=dict)


class Sampler:
    def __init__(self, hz: float = 4.0, history: int = 2400, nvml=None, gpu: NvmlReader | None = None):
        self.interval = 1.0 / hz
        self.samples: deque[Sample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchers: dict[str, ProcessWatcher] = {"app": ProcessWatcher(os.getpid())}
        self._system = SystemWatcher()
        self._gpu = gpu or NvmlReader(nvml)
        self._thread: threading.Thread | None = None

    @property
    def gpu_reason(self) -> str:
        return self._gpu.reason

    def watch(self, role: str, pid: int | None) -> None:
        """Follow another process (the engine); a restarted engine has a new pid."""
        with self._lock:
            if pid is None:
                self._watchers.pop(role, None)
            else:
                self._watchers[role] = ProcessWatcher(pid)

    def sample_once(self) -> Sample:
        t0 = time.perf_counter()
        with self._lock:
            watchers = dict(self._watchers)
        procs = {role: w.sample() for role, w in watchers.items()}
        pids = {w.pid for w in watchers.values()}
        s = Sample(time.monotonic(), procs, self._system.sample(), self._gpu.read(pids))
        s.sample_cost_s = time.perf_counter() - t0
        with self._lock:
            self.samples.append(s)
        return s

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): skip rather than burst
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> Sampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tokentop-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        self._gpu.close()
