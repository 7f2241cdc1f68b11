"""A sampling thread at a fixed rate, writing into bounded ring buffers.

Readers (the TUI's charts) take snapshots under a lock; the buffers never grow past `history`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from monitors.events import Sampled, now_ns
from monitors.gpu import GpuReading
from monitors.gpus import gpu_reader
from monitors.rapl import RaplReader, RaplReading
from monitors.system import ProcessSample, ProcessWatcher, SystemSample, SystemWatcher


@dataclass
class Sample:
    t_ns: int
    processes: dict[str, ProcessSample]
    system: SystemSample
    gpu: GpuReading
    cpu_energy: RaplReading = field(default_factory=RaplReading)
    sample_cost_s: float = 0.0
    extra: dict = field(default_factory=dict)


class Sampler:
    def __init__(self, hz: float = 4.0, history: int = 2400, nvml=None, gpu=None, rapl=None):
        self.interval = 1.0 / hz
        self.samples: deque[Sample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._handed_t = 0  # the sample fresh() last handed out
        self._stop = threading.Event()
        self._watchers: dict[str, ProcessWatcher] = {"app": ProcessWatcher(os.getpid())}
        self._system = SystemWatcher()
        self._gpu = gpu or gpu_reader(nvml)
        self._rapl = rapl or RaplReader()
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
        s = Sample(now_ns(), procs, self._system.sample(), self._gpu.read(pids), self._rapl.read())
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

    def fresh(self) -> Sampled | None:
        """The latest sample as an event, once: None until a newer one is taken (a frame's new reading)."""
        latest = self.latest()
        if latest is None or latest.t_ns == self._handed_t:
            return None
        self._handed_t = latest.t_ns
        return to_event(latest)

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval
            now = time.monotonic()
            # Fell behind (suspended, overloaded): drop the missed ticks and start the grid again,
            # rather than sample twice in a row (a late sample then an immediate catch-up, seen).
            if next_t - now < self.interval / 2:
                next_t = now + self.interval
            self._stop.wait(next_t - now)

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


def to_event(s: Sample) -> Sampled:
    """Flatten a sample into the recorded event (GPU figures summed over devices)."""
    eng, app = s.processes.get("engine"), s.processes.get("app")
    ev = Sampled(
        t_ns=s.t_ns,
        engine_rss=eng.rss if eng else None,
        engine_cpu=eng.cpu_percent if eng else None,
        app_rss=app.rss if app else None,
        app_cpu=app.cpu_percent if app else None,
        sys_cpu=s.system.cpu_percent,
        sys_mem_used=s.system.mem_used,
        sys_mem_total=s.system.mem_total,
        swap_used=s.system.swap_used,
    )
    if s.cpu_energy.counted_j is not None:
        ev.cpu_energy_mj = round(s.cpu_energy.counted_j * 1000)
    else:
        ev.cpu_energy_reason = s.cpu_energy.reason
    if s.gpu.gpus:
        ev.gpus = [asdict(g) for g in s.gpu.gpus]
    gpus = [g for g in s.gpu.gpus if not g.reason or g.mem_used is not None]
    # The figures follow the GPUs the watched processes hold memory on (NVML's process list):
    # the engine's, not the box's average; the others keep their own lines (ev.gpus).
    gpus = [g for g in gpus if g.proc_mem] or gpus
    if not s.gpu.available or not gpus:
        ev.gpu_reason = s.gpu.reason or next((g.reason for g in s.gpu.gpus if g.reason), "n/a")
        return ev

    def total(attr):
        vals = [getattr(g, attr) for g in gpus if getattr(g, attr) is not None]
        return sum(vals) if vals else None

    sm = [g.sm_util for g in gpus if g.sm_util is not None]
    ev.gpu_sm = sum(sm) / len(sm) if sm else None
    mem = [g.mem_util for g in gpus if g.mem_util is not None]
    ev.gpu_mem_util = sum(mem) / len(mem) if mem else None
    clocks = [g.sm_clock_mhz for g in gpus if g.sm_clock_mhz is not None]
    ev.gpu_sm_clock_mhz = max(clocks) if clocks else None
    ev.gpu_mem_used, ev.gpu_mem_total = total("mem_used"), total("mem_total")
    ev.gpu_proc_mem, ev.gpu_power_w = total("proc_mem"), total("power_w")
    ev.gpu_reason = next((g.reason for g in s.gpu.gpus if g.reason), "")
    dram = [g.dram_pct for g in gpus if g.dram_pct is not None]
    ev.gpu_dram_pct = sum(dram) / len(dram) if dram else None
    ev.gpu_slowed = ", ".join(dict.fromkeys(r for g in gpus for r in g.slowed or ()))
    return ev
