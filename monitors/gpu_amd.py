"""AMD GPUs through the amdgpu driver's sysfs and hwmon files, and a process's own VRAM through DRM
fdinfo: no library, no root. The files and their units are the kernel's (Documentation/gpu/amdgpu/
thermal.rst, driver-misc.rst; Documentation/gpu/drm-usage-stats.rst for fdinfo):

    device/gpu_busy_percent, mem_busy_percent    %
    device/mem_info_vram_used, mem_info_vram_total    bytes
    device/hwmon/hwmon*/power1_average, else power1_input    µW
    device/hwmon/hwmon*/freq1_input (sclk)    Hz; else the `*` line of device/pp_dpm_sclk (MHz)
    device/hwmon/hwmon*/temp*_input (edge, junction, mem)    m°C
    device/hwmon/hwmon*/energy1_input, where the part has it    µJ
    /proc/PID/fdinfo/*: the process's own VRAM and busy share (monitors/drm_fdinfo.py)
    amdsmi's violation status, where the package imports: what holds the clocks down (monitors/amd_smi.py)

`root` is where the tree starts ("/" on a live system; a fixture folder in the tests and for
`probe --root`). A file that vanishes (a GPU reset, a hot unplug) or reads garbled turns its figure
into None and names the reason in the device's `reason`; nothing here raises."""

from __future__ import annotations

import time
from pathlib import Path

from monitors.amd_smi import Violations
from monitors.gpu import GpuReading, GpuSample
from monitors.sysfs import DrmReader, Fields, cards, read_text

AMD_VENDOR = "0x1002"
SOURCES = {
    "sm_util": "device/gpu_busy_percent",
    "mem_util": "device/mem_busy_percent",
    "mem_used": "device/mem_info_vram_used",
    "mem_total": "device/mem_info_vram_total",
    "power_w": "hwmon power1_average, else power1_input",
    "sm_clock_mhz": "hwmon freq1_input, else pp_dpm_sclk's starred level",
    "temp_c": "hwmon temp*_input: junction, else edge",
    "energy_mj": "hwmon energy1_input",
    "proc_mem": "fdinfo drm-resident-vram (drm-memory-vram before)",
    "proc_busy_pct": "fdinfo drm-engine-*, over the time between readings",
    "slowed": "amdsmi_get_violation_status: active_ppt_pwr, active_*_thrm",
}
NOT_REPORTED = {"mem_clock_mhz": "not read (pp_dpm_mclk)"}


def _sclk_mhz(device: Path) -> int | None:
    """The current shader clock from pp_dpm_sclk's starred line ("1: 2100Mhz *")."""
    for line in (read_text(device / "pp_dpm_sclk") or "").splitlines():
        if line.rstrip().endswith("*"):
            digits = "".join(ch for ch in line.split(":", 1)[-1] if ch.isdigit())
            return int(digits) if digits else None
    return None


def _temperature(f: Fields) -> float | None:
    """The hottest point the driver names (junction over edge): throttling follows it."""
    labelled = f.labelled("temp")
    for label in ("junction", "edge", *labelled):
        if label in labelled:
            return f.number(labelled[label], 1e-3)
    return None


class AmdSysfsReader(DrmReader):
    """The same interface as NvmlReader: read(pids) -> GpuReading, process_memory(pids), close()."""

    name, sources = "amdgpu sysfs", SOURCES
    rises = ("proc_busy_pct",)  # figures that are a counter's rise between two readings

    drivers = ("amdgpu",)

    def __init__(self, root: str | Path = "/", clock=time.monotonic_ns, smi=None):
        super().__init__(root, clock)
        self.devices = cards(self.root, AMD_VENDOR)
        # amdsmi reads the live driver: not for a fixture's or a dump's folder
        self.smi = smi if smi is not None else Violations() if self.devices and Path(root) == Path("/") else None
        self.found_cards(self.devices)
        self.names = {d: read_text(d / "product_name") or f"AMD GPU ({d.parent.name})" for d in self.devices}
        self.reason = "" if self.ok else f"n/a: no AMD GPU under {self.root / 'sys' / 'class' / 'drm'} (amdgpu's sysfs)"

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        if not self.ok:
            return GpuReading(False, self.reason)
        own = self.own(pids)
        gpus = []
        for i, device in enumerate(self.devices):
            f = Fields(device)
            s = GpuSample(i, name=self.names[device])
            s.sm_util = f.number(device / "gpu_busy_percent")
            s.mem_util = f.number(device / "mem_busy_percent") if (device / "mem_busy_percent").exists() else None
            used, total = f.number(device / "mem_info_vram_used"), f.number(device / "mem_info_vram_total")
            s.mem_used, s.mem_total = (int(used) if used is not None else None), (int(total) if total is not None else None)
            power = f.hwmon("power1_average", "power1_input")
            s.power_w = f.number(power, 1e-6) if power else None
            freq = f.hwmon("freq1_input")
            clock = f.number(freq, 1e-6) if freq else _sclk_mhz(device)
            s.sm_clock_mhz = round(clock) if clock is not None else None
            s.temp_c = _temperature(f)
            energy = f.hwmon("energy1_input")
            s.energy_mj = round(uj / 1000) if energy and (uj := f.number(energy)) is not None else None
            s.slowed = self.smi.slowed(self.buses[device]) if self.smi is not None else None
            gpus.append(self.finish(s, f, own, pids))
        return GpuReading(True, "", gpus)

    @property
    def not_reported(self) -> dict[str, str]:
        why = self.smi.reason if self.smi is not None else "not read: amdsmi reads the live driver, not a folder"
        return {**NOT_REPORTED, "slowed": why} if why else NOT_REPORTED

    def close(self) -> None:
        if self.smi is not None:
            self.smi.close()
        super().close()
