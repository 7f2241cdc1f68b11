"""Apple-silicon GPUs on macOS, with no sudo: utilization and the GPU's memory in use from the
IORegistry, power, clock and temperature from `macmon pipe` where it is installed. `powermetrics`
(root's) is never used.

    ioreg -r -d 1 -w 0 -c IOAccelerator -a    a plist: each accelerator's "model" and its
        PerformanceStatistics: "Device Utilization %" (%), "In use system memory" (bytes of the
        unified memory the GPU holds)
    macmon pipe -i MS    a JSON line each MS ms: gpu_usage [MHz, busy ratio], gpu_power (W, the
        interval's mean: its sum over the lines is the energy), temp.gpu_temp_avg (°C)

ioreg is a process spawned a read, so it runs at most once a second (IOREG_EVERY_S), not at the
sampler's 4 Hz. `root` holding an `ioreg.plist` (a `tokentop probe --dump` from a Mac) is read in
its place, on any system."""

from __future__ import annotations

import json
import plistlib
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.parsers.expat import ExpatError

from monitors.gpu import GpuReading, GpuSample

IOREG = ["ioreg", "-r", "-d", "1", "-w", "0", "-c", "IOAccelerator", "-a"]
IOREG_EVERY_S = 1.0
MACMON_MS = 250
STALE_LINES = 8  # macmon silent for this many of its intervals: hung, its figures n/a
SOURCES = {
    "sm_util": "ioreg IOAccelerator PerformanceStatistics: Device Utilization %",
    "mem_used": "ioreg IOAccelerator PerformanceStatistics: In use system memory",
    "power_w": "macmon pipe: gpu_power",
    "energy_mj": "macmon pipe: gpu_power summed over its intervals",
    "sm_clock_mhz": "macmon pipe: gpu_usage[0]",
    "temp_c": "macmon pipe: temp.gpu_temp_avg",
}
NOT_REPORTED = {
    "mem_total": "unified memory: the system's (the memory pane), not the GPU's own",
    "mem_util": "not in the IORegistry's statistics",
    "mem_clock_mhz": "not in macmon's lines",
    "proc_mem": "not read per process on macOS",
    "proc_busy_pct": "not read per process on macOS",
}


def ioreg() -> bytes:
    """The IORegistry's accelerators, as a plist."""
    return subprocess.run(IOREG, capture_output=True, timeout=5, check=True).stdout


class MacmonPipe:
    """`macmon pipe`'s lines read in a thread of their own: the latest kept, the energy summed."""

    def __init__(self, cmd: list[str], interval_s: float, clock):
        self.interval_s, self.clock = interval_s, clock
        self.latest: dict | None = None
        self.at_ns = clock()
        self.energy_j = 0.0
        self.reason = ""
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                got = json.loads(line)
                power = float(got["gpu_power"])
            except (ValueError, KeyError, TypeError):
                with self._lock:
                    self.reason = f"macmon: a line not as expected ({line.strip()[:40]!r})"
                continue
            with self._lock:
                self.latest, self.at_ns, self.reason = got, self.clock(), ""
                self.energy_j += power * self.interval_s
        with self._lock:
            self.reason = f"macmon exited ({self.proc.wait()})"

    def get(self) -> tuple[dict | None, float, str]:
        """The latest line, the energy so far (J), and why there is no line where there is none."""
        with self._lock:
            silent_s = (self.clock() - self.at_ns) / 1e9
            if self.latest is not None and silent_s > STALE_LINES * self.interval_s + 2:
                return None, self.energy_j, f"macmon: no line for {silent_s:.0f} s (hung?)"
            return self.latest, self.energy_j, self.reason or ("macmon: no line yet" if self.latest is None else "")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class AppleReader:
    """The same interface as NvmlReader: read(pids) -> GpuReading, process_memory(pids), close()."""

    name, sources, not_reported, rises = "Apple IORegistry", SOURCES, NOT_REPORTED, ()

    def __init__(self, root: str | Path = "/", run=ioreg, macmon: list[str] | None = None, platform: str = sys.platform, clock=time.monotonic_ns):
        self.dumped: Path | None = Path(root) / "ioreg.plist"
        self.run, self.clock = run, clock
        self.cached: tuple[list[dict], int] | None = None  # the accelerators, read at
        self.macmon: MacmonPipe | None = None
        self.ok, self.reason = False, ""
        if self.dumped is not None and not self.dumped.is_file():
            self.dumped = None
            if platform != "darwin":
                self.reason = "n/a: not macOS (Apple's GPUs are read through its IORegistry)"
                return
        found, why = self._accelerators()
        self.ok, self.reason = bool(found), "" if found else f"n/a: {why}"
        if self.ok and self.dumped is None:
            cmd = macmon or (["macmon", "pipe", "-i", str(MACMON_MS)] if shutil.which("macmon") else None)
            self.macmon = MacmonPipe(cmd, MACMON_MS / 1000, clock) if cmd else None

    def _accelerators(self) -> tuple[list[dict], str]:
        now = self.clock()
        if self.cached is not None and now - self.cached[1] < IOREG_EVERY_S * 1e9:
            return self.cached[0], ""
        try:
            raw = self.dumped.read_bytes() if self.dumped else self.run()
            entries = plistlib.loads(raw)
        except FileNotFoundError:
            return [], "ioreg not found"
        except (OSError, subprocess.SubprocessError, plistlib.InvalidFileException, ExpatError, ValueError) as exc:
            return [], f"ioreg's IOAccelerator unreadable ({type(exc).__name__})"
        found = [e for e in entries if isinstance(e, dict) and isinstance(e.get("PerformanceStatistics"), dict)]
        self.cached = (found, now)
        return found, "" if found else "no IOAccelerator with PerformanceStatistics in the IORegistry"

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        if not self.ok:
            return GpuReading(False, self.reason)
        found, why = self._accelerators()
        if not found:
            return GpuReading(False, f"n/a: {why}")
        if self.macmon is not None:
            line, energy_j, macmon_why = self.macmon.get()
        else:
            line, energy_j = None, 0.0
            macmon_why = "macmon's lines are the live Mac's, not a folder's" if self.dumped else "macmon not installed (power, clock, temperature)"
        gpus = []
        for i, entry in enumerate(found):
            stats = entry["PerformanceStatistics"]
            s = GpuSample(i, name=f"{entry.get('model', 'Apple GPU')} ({entry.get('gpu-core-count', '?')} GPU cores)")
            util, used = stats.get("Device Utilization %"), stats.get("In use system memory")
            s.sm_util = float(util) if isinstance(util, int | float) else None
            s.mem_used = int(used) if isinstance(used, int) else None
            if line is not None and i == 0:  # macmon speaks of the one GPU a Mac has
                s.power_w, s.energy_mj = float(line["gpu_power"]), round(energy_j * 1000)
                usage, temp = line.get("gpu_usage"), line.get("temp")
                mhz = usage[0] if isinstance(usage, list) and usage else None
                temp = temp.get("gpu_temp_avg") if isinstance(temp, dict) else None
                s.sm_clock_mhz = round(mhz) if isinstance(mhz, int | float) else None
                s.temp_c = float(temp) if isinstance(temp, int | float) else None
            s.reason = macmon_why
            gpus.append(s)
        return GpuReading(True, "", gpus)

    def process_memory(self, pids: set[int] | frozenset[int]) -> int | None:
        return None

    def close(self) -> None:
        if self.macmon is not None:
            self.macmon.close()
