"""Intel GPUs (Arc, Data Center Max, integrated) through the i915 and xe drivers' sysfs and hwmon
files, and a process's own memory and busy share through DRM fdinfo: no library, no root. The files
and their units are the kernel's (Documentation/ABI/testing/sysfs-driver-intel-i915-hwmon and
-xe-hwmon; Documentation/gpu/xe/xe_gt_freq.rst; Documentation/gpu/drm-usage-stats.rst):

    card*/gt_act_freq_mhz (i915); device/tile0/gt0/freq0/act_freq (xe)    MHz
    device/hwmon/hwmon*/energy1_input    µJ, the card's (xe) or device's (i915); power from two readings
    device/hwmon/hwmon*/temp*_input (xe: pkg, vram)    m°C
    /proc/PID/fdinfo/*: the process's own memory (local*, vram*) and busy share (monitors/drm_fdinfo.py)

Neither driver writes the device's busy share or its memory in use to sysfs: the first is the PMU's
(perf events, privileged by default), the second each client's own. Those read n/a with that reason
(NOT_REPORTED); the engine's own share and memory come from its fdinfo."""

from __future__ import annotations

import time
from pathlib import Path

from monitors.gpu import GpuReading, GpuSample
from monitors.sysfs import DrmReader, Fields, cards, read_text, uevent

INTEL_VENDOR = "0x8086"
DRIVERS = ("i915", "xe")
SOURCES = {
    "sm_clock_mhz": "gt_act_freq_mhz (i915), tile0/gt0/freq0/act_freq (xe)",
    "energy_mj": "hwmon energy1_input",
    "power_w": "hwmon energy1_input, over the time between readings",
    "temp_c": "hwmon temp*_input: pkg, else the first",
    "proc_mem": "fdinfo drm-resident-local* (i915), drm-resident-vram* (xe)",
    "proc_busy_pct": "fdinfo drm-engine-* (i915), drm-cycles-* (xe), over the time between readings",
}
NOT_REPORTED = {
    "slowed": "not read (the GT's throttle_reason_* files)",
    "sm_util": "the device's busy share is the i915/xe PMU's (perf events), not read; the engine's own is fdinfo's",
    "mem_util": "no sysfs file for it on i915 or xe",
    "mem_used": "no sysfs file for it on i915 or xe; the engine's own is fdinfo's",
    "mem_total": "no sysfs file for it on i915 or xe",
    "mem_clock_mhz": "no sysfs file for it on i915 or xe",
}


def _clock_file(device: Path, driver: str) -> Path | None:
    if driver == "i915":
        return device.parent / "gt_act_freq_mhz"
    found = sorted(device.glob("tile*/gt*/freq0/act_freq"))  # tile0/gt0: render and compute; media is gt1
    return found[0] if found else None


class IntelSysfsReader(DrmReader):
    """The same interface as NvmlReader: read(pids) -> GpuReading, process_memory(pids), close()."""

    name, sources, not_reported = "i915/xe sysfs", SOURCES, NOT_REPORTED
    rises = ("power_w", "proc_busy_pct")  # figures that are a counter's rise between two readings

    drivers = DRIVERS

    def __init__(self, root: str | Path = "/", clock=time.monotonic_ns):
        super().__init__(root, clock)
        found = [(d, uevent(d)) for d in cards(self.root, INTEL_VENDOR)]
        self.devices = [(d, event["DRIVER"]) for d, event in found if event.get("DRIVER") in DRIVERS]
        self.found_cards([d for d, _ in self.devices])
        ids = {d: event.get("PCI_ID") or read_text(d / "device") or "?" for d, event in found}
        self.names = {d: f"Intel GPU {ids[d]} ({driver})" for d, driver in self.devices}
        self.clocks = {d: _clock_file(d, driver) for d, driver in self.devices}  # found once: a vanished gt0 is n/a, not gt1's
        self.energy: dict[Path, tuple[float, int]] = {}  # the last reading: (µJ, at ns)
        self.reason = "" if self.ok else f"n/a: no Intel GPU under {self.root / 'sys' / 'class' / 'drm'} (i915's or xe's sysfs)"

    def _power(self, f: Fields, s: GpuSample) -> None:
        """energy_mj from the counter; power_w over the time since the last reading (none at the first)."""
        path = f.hwmon("energy1_input")
        uj = f.number(path) if path else None
        if uj is None:
            return
        now = self.clock()
        s.energy_mj = round(uj / 1000)
        before = self.energy.get(f.device)
        self.energy[f.device] = (uj, now)
        if before is not None and now > before[1] and uj >= before[0]:
            s.power_w = (uj - before[0]) * 1e-6 / ((now - before[1]) * 1e-9)

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        if not self.ok:
            return GpuReading(False, self.reason)
        own = self.own(pids)
        gpus = []
        for i, (device, _) in enumerate(self.devices):
            f = Fields(device)
            s = GpuSample(i, name=self.names[device])
            clock = self.clocks[device]
            mhz = f.number(clock) if clock else None
            s.sm_clock_mhz = round(mhz) if mhz is not None else None
            self._power(f, s)
            temps = f.labelled("temp")
            hottest = temps.get("pkg") or next(iter(temps.values()), None)
            s.temp_c = f.number(hottest, 1e-3) if hottest else None
            gpus.append(self.finish(s, f, own, pids))
        return GpuReading(True, "", gpus)
