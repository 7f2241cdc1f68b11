"""The engine's own memory: a run's peak RSS and torch's memory while it runs (`MemoryWatch`), the
demo leak (`demo_leak`), and the CUDA allocator's history over a window of runs (`CudaHistory`,
for the app's H key and `leakcheck --cuda-snapshot`)."""

from __future__ import annotations

import functools
import os
import time

import torch

from monitors.events import AllocatorHistory
from monitors.gpus import gpu_reader
from monitors.system import PeakRss
from monitors.torch_memory import read_torch_memory

# The allocator keeps its last alloc/free events in a ring this long: older ones drop out of the
# dump, whose size and time grow with it.
MAX_ENTRIES = 200_000


def demo_leak(device: str, nbytes: int, kind: str):
    """Memory kept on purpose: a tensor on the engine's device, where a real leak of this engine
    would be, or Python objects of a KiB."""
    if kind == "python":
        return [bytearray(1024) for _ in range(nbytes // 1024)]  # zeroed: its pages are resident
    return torch.ones(nbytes, dtype=torch.uint8, device=device)


@functools.cache
def _gpu_reader():
    # The driver's count of this process's device memory: the CUDA context and every pool,
    # CUDA graphs' private ones too, which the allocator's figures leave out (NVML's; on ROCm,
    # whose torch runs as cuda, amdgpu's fdinfo).
    return gpu_reader()


class MemoryWatch:
    """A run's peak RSS (the kernel's high-water mark, restarted here: monitors.system.PeakRss), and
    on CUDA, XPU and MPS torch's memory, emitted at 4 Hz, and the device memory the run left."""

    def __init__(self, device: str, emit, gpus: tuple[str, ...] = ()):
        self.device, self.emit, self.gpus = device, emit, gpus
        self.allocator = device.startswith(("cuda", "xpu", "mps"))  # the allocators torch_memory reads
        self._peak = PeakRss()
        self._peak.reset()
        self.last_mem = 0
        self.highest = 0  # the run's highest allocation read: MPS's peak, which torch does not keep

    @property
    def peak_rss(self) -> int:
        return self._peak.read()

    def tick(self, now: int) -> None:
        if self.allocator and now - self.last_mem > 250_000_000:
            self.last_mem = now
            mem = read_torch_memory(self.device, self.gpus)
            if mem:
                self.highest = max(self.highest, mem.peak)
                self.emit(mem)

    def after_run(self) -> tuple[int | None, int | None, int | None, int | None]:
        """(torch's peak, allocated, reserved, NVML's count of this process) once the run ended; Nones on the CPU."""
        mem = read_torch_memory(self.device, self.gpus)
        if mem is None:
            return None, None, None, None
        return max(mem.peak, self.highest), mem.allocated, mem.reserved, _gpu_reader().process_memory({os.getpid()})


def history_refusal(device: str) -> str | None:
    """Why the allocator's history cannot be recorded on this device, or None."""
    if not device.startswith("cuda"):
        return (
            f"the allocator history is CUDA's caching allocator's, and this engine runs on {device}; "
            "`tokentop leakcheck` names the lines that grow on any device"
        )
    return None


class CudaHistory:
    """torch.cuda.memory._record_memory_history from `start()` (the run in flight, or the next) for
    `runs` finished runs, then dumped to `path` as the pickle memory_viz reads. Each state is an
    AllocatorHistory event; `after_run` says when the window is over."""

    def __init__(self, path: str, runs: int, emit, next_run: int):
        self.path, self.runs, self.emit = path, runs, emit
        self.first_run, self.left = next_run, runs

    def start(self) -> None:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self._say(0.0)

    def after_run(self) -> bool:
        """One run of the window finished; True once the history is dumped (or failed to be)."""
        self.left -= 1
        if self.left > 0:
            self._say(0.0)
            return False
        self.dump()
        return True

    def dump(self) -> None:
        """The history so far to `path`, and recording off: at the window's end, or when what
        records it ends early (a failed run, Ctrl-C), so the runs recorded are not lost."""
        self.runs, self.left = max(1, self.runs - self.left), 0  # the run cut short counts: it is in the history
        t0 = time.perf_counter()
        try:
            torch.cuda.memory._dump_snapshot(self.path)
            error = ""
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)  # recording costs every allocation: off at once
        self._say(time.perf_counter() - t0, error)

    def _say(self, seconds: float, error: str = "") -> None:
        self.emit(AllocatorHistory(path=self.path, runs=self.runs, left=self.left, first_run=self.first_run, seconds=seconds, error=error))
