"""psutil readings: one process (RSS, CPU %, threads) and the whole system."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass
class ProcessSample:
    pid: int
    rss: int | None
    cpu_percent: float | None
    threads: int | None
    reason: str = ""


@dataclass
class SystemSample:
    mem_used: int
    mem_available: int
    mem_total: int
    swap_used: int
    cpu_percent: float
    per_core: list[float]


class ProcessWatcher:
    """Keeps one psutil.Process so that cpu_percent measures the interval since the last call."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._proc: psutil.Process | None = psutil.Process(pid)
            self._proc.cpu_percent(None)
        except psutil.Error as exc:
            self._proc = None
            self._reason = f"process {pid}: {type(exc).__name__}"

    def sample(self) -> ProcessSample:
        if self._proc is None:
            return ProcessSample(self.pid, None, None, None, self._reason)
        try:
            with self._proc.oneshot():
                return ProcessSample(self.pid, self._proc.memory_info().rss, self._proc.cpu_percent(None), self._proc.num_threads())
        except psutil.Error as exc:
            return ProcessSample(self.pid, None, None, None, f"process {self.pid} gone ({type(exc).__name__})")


class SystemWatcher:
    def __init__(self) -> None:
        psutil.cpu_percent(None, percpu=True)

    def sample(self) -> SystemSample:
        vm = psutil.virtual_memory()
        per_core = psutil.cpu_percent(None, percpu=True)
        return SystemSample(
            vm.total - vm.available,
            vm.available,
            vm.total,
            psutil.swap_memory().used,
            sum(per_core) / len(per_core) if per_core else 0.0,
            per_core,
        )


_SELF: dict[int, psutil.Process] = {}


def rss_bytes(pid: int | None = None) -> int:
    """RSS of a process (this one by default); the handle is kept, as building one costs ~60 µs."""
    pid = pid or os.getpid()
    proc = _SELF.get(pid)
    if proc is None:
        proc = _SELF[pid] = psutil.Process(pid)
    return proc.memory_info().rss


class PeakRss:
    """The most resident memory this process held since reset(): the kernel's high-water mark (VmHWM),
    restarted at the current RSS by writing 5 to /proc/self/clear_refs (Linux 4.0+).

    Why not the largest of periodic RSS reads: a buffer that lives between two reads is never
    seen (a prefill's activations, a cache rebuilt at a lever switch), and reading often enough to
    catch it costs a /proc read per token. The kernel updates its mark on every page it maps.
    Where the mark cannot be restarted (not Linux, or clear_refs not writable) the peak is the
    larger of the RSS at reset and at read: a lower bound, as `exact` says."""

    def __init__(self) -> None:
        self.exact = False
        self._start = 0

    def reset(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.exact = _vm_hwm() is not None
        except OSError:
            self.exact = False
        self._start = rss_bytes()

    def read(self) -> int:
        hwm = _vm_hwm() if self.exact else None
        return hwm if hwm is not None else max(self._start, rss_bytes())


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def glibc(name: str):
    """glibc's function `name`, or None where the C library is another or older than it."""
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = glibc("malloc_trim")  # not glibc: the baseline is plain RSS


def trim_heap() -> None:
    """Give free heap pages back to the OS, so RSS is live memory.

    Without it a leak can hide for many runs: new allocations reuse pages freed earlier that
    still count in RSS, and the baseline stays flat (a 1 MB/run leak reads as +0.0002 MB/run after
    hundreds of MB were freed before it).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
