"""GPU readings through NVML (nvidia-ml-py, imported as pynvml), for every device.

No GPU is a normal case: NVML missing, the driver not loaded, a driver/library mismatch or a
GPU lost mid-session turn the value into "n/a" with the reason; nothing here raises.
The NVML module is injectable so tests can stand in for hardware that is absent.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar

from monitors.gpu_counters import Gpm, clock_events


@dataclass
class GpuSample:
    index: int
    name: str = ""
    sm_util: float | None = None
    mem_util: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    proc_mem: int | None = None
    proc_busy_pct: float | None = None  # the watched processes' own busy share, from DRM fdinfo (AMD, Intel)
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    energy_mj: int | None = None  # NVML's energy counter: millijoules since the driver loaded (Volta and later)
    # GPM (Hopper and later), over the interval since the last reading: % of DRAM bandwidth, of SMs busy, of SMs on tensor cores
    dram_pct: float | None = None
    sm_active_pct: float | None = None
    tensor_pct: float | None = None
    slowed: list[str] | None = None  # NVML's clock-event reasons holding the clocks down now (power cap, thermal, ...)
    reason: str = ""


@dataclass
class GpuReading:
    available: bool
    reason: str = ""
    gpus: list[GpuSample] = field(default_factory=list)


def _load_nvml():
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _err_text(nvml, exc: Exception) -> str:
    try:
        return str(nvml.nvmlErrorString(exc.value)) if hasattr(exc, "value") else str(exc)
    except Exception:  # noqa: BLE001 - NVML's own error path failing must not raise either
        return str(exc) or type(exc).__name__


SOURCES = {
    "sm_util": "nvmlDeviceGetUtilizationRates",
    "mem_util": "nvmlDeviceGetUtilizationRates",
    "mem_used": "nvmlDeviceGetMemoryInfo (v2)",
    "mem_total": "nvmlDeviceGetMemoryInfo (v2)",
    "proc_mem": "nvmlDeviceGetComputeRunningProcesses",
    "power_w": "nvmlDeviceGetPowerUsage",
    "temp_c": "nvmlDeviceGetTemperature (GPU)",
    "sm_clock_mhz": "nvmlDeviceGetClockInfo (SM)",
    "mem_clock_mhz": "nvmlDeviceGetClockInfo (MEM)",
    "energy_mj": "nvmlDeviceGetTotalEnergyConsumption",
    "slowed": "nvmlDeviceGetCurrentClocksEventReasons",
}

NOT_REPORTED = {"proc_busy_pct": "not read: NVML's per-process utilization samples"}


class NvmlReader:
    name, sources = "NVML", SOURCES
    not_reported, rises = NOT_REPORTED, ()

    def __init__(self, nvml=None, load=_load_nvml):
        self.nvml = nvml if nvml is not None else load()
        self.ok = False
        self.reason = ""
        self.count = 0
        self.lost: dict[int, str] = {}
        self.gpm: dict[int, Gpm] = {}  # by GPU index, made at its first reading
        if self.nvml is None:
            self.reason = "n/a: nvidia-ml-py (pynvml) not installed"
            return
        try:
            self.nvml.nvmlInit()
            self.count = int(self.nvml.nvmlDeviceGetCount())
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, mismatch, ...
            self.reason = f"n/a: NVML unavailable ({_err_text(self.nvml, exc)})"
            return
        if self.count == 0:
            self.ok = False
            self.reason = "n/a: no NVIDIA GPU found"

    def _field(self, sample: GpuSample, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - one unsupported query must not hide the others
            if not sample.reason:
                sample.reason = f"{getattr(fn, '__name__', 'query')}: {_err_text(self.nvml, exc)}"
            return None

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        if not self.ok:
            return GpuReading(False, self.reason)
        nv = self.nvml
        gpus = []
        for i in range(self.count):
            s = GpuSample(i)
            if i in self.lost:
                s.reason = self.lost[i]
                gpus.append(s)
                continue
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(h)
                s.name = name.decode() if isinstance(name, bytes) else str(name)
            except Exception as exc:  # noqa: BLE001 - GPU is lost or fell off the bus
                text = _err_text(nv, exc)
                if "lost" in text.lower() or type(exc).__name__.endswith("GpuIsLost"):
                    self.lost[i] = f"n/a: GPU {i} lost ({text})"
                s.reason = f"n/a: GPU {i} ({text})"
                gpus.append(s)
                continue
            util = self._field(s, nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                s.sm_util, s.mem_util = float(util.gpu), float(util.memory)
            mem = self._memory(s, h)
            if mem is not None:
                s.mem_used, s.mem_total = int(mem.used), int(mem.total)
            s.proc_mem = self._proc_mem(s, h, pids)
            power = self._field(s, nv.nvmlDeviceGetPowerUsage, h)
            s.power_w = power / 1000.0 if power is not None else None
            s.temp_c = self._field(s, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            s.sm_clock_mhz = self._field(s, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            s.mem_clock_mhz = self._field(s, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
            s.energy_mj = self._energy(h)
            s.slowed = clock_events(nv, h)
            if i not in self.gpm:
                self.gpm[i] = Gpm(nv, h)
            for name, value in (self.gpm[i].read() or {}).items():
                setattr(s, name, value)
            gpus.append(s)
        return GpuReading(True, "", gpus)

    def _memory(self, sample: GpuSample, handle):
        """nvidia-smi's figures: v2 of the query leaves out the memory the driver reserves for itself,
        which v1 counts as used (615 MiB on an H200, seen against nvidia-smi); v1 where the driver is
        older than v2."""
        try:
            return self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2)
        except Exception:  # noqa: BLE001 - no _v2 in this driver: v1 reads, off by what it reserves
            return self._field(sample, self.nvml.nvmlDeviceGetMemoryInfo, handle)

    def _energy(self, handle) -> int | None:
        """The energy counter, or None where the GPU has none (before Volta): its absence is not
        a reading's failure, so it names no reason."""
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported on older GPUs, as any other
            return None

    def _proc_mem(self, sample: GpuSample, handle, pids) -> int | None:
        procs = self._field(sample, self.nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        return None if procs is None else sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in pids)

    def process_memory(self, pids: set[int] | frozenset[int]) -> int | None:
        """What these processes hold on every GPU, by the driver's count (context, allocator pools and
        all): the engine's device baseline after a run. None where NVML cannot tell."""
        if not self.ok:
            return None
        found = []
        for i in range(self.count):
            if i in self.lost:
                continue
            s = GpuSample(i)
            with contextlib.suppress(Exception):  # a GPU lost since the last reading: the others still count
                found.append(self._proc_mem(s, self.nvml.nvmlDeviceGetHandleByIndex(i), pids))
        vals = [v for v in found if v is not None]
        return sum(vals) if vals else None

    def close(self) -> None:
        for gpm in self.gpm.values():
            gpm.close()
        if self.ok:
            with contextlib.suppress(Exception):  # shutting down a broken NVML is best effort
                self.nvml.nvmlShutdown()
            self.ok = False


NVML_DUMP = "nvml.json"  # NVML's reading in a folder `tokentop probe --dump` wrote: no file of the system holds it
NUMBERS = {f.name for f in fields(GpuSample)} - {"index", "name", "slowed", "reason"}


def nvml_dump(reading: GpuReading) -> str:
    """A reading as the JSON NvmlDumpReader reads back."""
    return json.dumps({"gpus": [asdict(g) for g in reading.gpus]}, indent=1)


class NvmlDumpReader:
    """NVML's figures as a dump holds them (`tokentop probe --root DIR`): what NVML read on the
    machine the dump was taken on, held still. NvmlReader's interface, its sources marked dumped."""

    name, not_reported, rises = "NVML", NOT_REPORTED, ()
    sources: ClassVar[dict[str, str]] = {key: f"{call} (dumped)" for key, call in SOURCES.items()}

    def __init__(self, root: str | Path):
        path = Path(root) / NVML_DUMP
        self.ok, self.reason, self.gpus = False, "", []
        if not path.is_file():
            self.reason = f"n/a: no {NVML_DUMP} in this folder (NVML is the live driver's: a dump taken where it reads a GPU holds its figures)"
            return
        try:
            self.gpus = [_sample(g) for g in json.loads(path.read_text(encoding="utf-8"))["gpus"]]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            self.reason = f"n/a: {path} unreadable ({exc})"
            return
        self.ok = bool(self.gpus)
        self.reason = "" if self.ok else f"n/a: {path} holds no GPU"

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        return GpuReading(True, "", [replace(g) for g in self.gpus]) if self.ok else GpuReading(False, self.reason)

    def process_memory(self, pids: set[int] | frozenset[int]) -> int | None:
        return None

    def close(self) -> None:
        """Nothing held open: the figures were read when it was made."""


def _sample(g: dict) -> GpuSample:
    """A dumped device, its every field checked: a garbled file is refused whole, never half read."""
    if not isinstance(g, dict) or not isinstance(g.get("index"), int) or not isinstance(g.get("name", ""), str):
        raise ValueError(f"not a device: {g!r:.80}")
    for key in NUMBERS & g.keys():
        v = g[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"{key} is {v!r:.40}, not a number")
    slowed = g.get("slowed")
    if slowed is not None and (not isinstance(slowed, list) or not all(isinstance(x, str) for x in slowed)):
        raise ValueError(f"slowed is {slowed!r:.40}, not a list of reasons")
    return GpuSample(**{k: v for k, v in g.items() if k in NUMBERS | {"index", "name", "slowed", "reason"}})
