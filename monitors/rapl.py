"""The CPU's own energy counter through the kernel's powercap (RAPL: Intel, and AMD since Zen):
/sys/class/powercap/intel-rapl:N/energy_uj, µJ a package since boot, wrapping at
max_energy_range_uj (Documentation/power/powercap/powercap.rst). Read by `tokentop probe`; a VM
(this project's CI machines among them) has no such folder, and the reading says so. On kernels
since 5.10 energy_uj is root's alone (a side channel, CVE-2020-8694): unreadable is n/a, said."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from monitors.sysfs import read_text


@dataclass
class RaplReading:
    energy_j: float | None = None  # every package's, since boot
    power_w: float | None = None  # since the last reading
    packages: int = 0
    reason: str = ""
    counted_j: float | None = None  # every package's since this reader's first reading, wraps undone: what a span's energy is read from


class RaplReader:
    def __init__(self, root: str | Path = "/", clock=time.monotonic_ns):
        base = Path(root) / "sys" / "class" / "powercap"
        self.where = base
        # The packages: intel-rapl:0, intel-rapl:1 (their subzones, intel-rapl:0:0, are parts of them)
        self.zones = [z for z in sorted(base.glob("intel-rapl:*")) if z.name.count(":") == 1]
        self.clock = clock
        self.last: dict[Path, int] = {}  # zone: µJ at the last reading
        self.at: int | None = None
        self.counted_uj = 0

    def read(self) -> RaplReading:
        if not self.zones:
            return RaplReading(reason=f"n/a: no RAPL package under {self.where} (a VM, or a CPU without it)")
        now, total_uj, rise_uj = self.clock(), 0, 0
        seen = {}
        for zone in self.zones:
            text = read_text(zone / "energy_uj")
            if text is None or not text.isdigit():
                why = f"not a number ({text[:20]!r})" if text else "root's alone on this kernel" if (zone / "energy_uj").exists() else "gone"
                return RaplReading(reason=f"n/a: {zone.name}/energy_uj unreadable: {why}")
            uj = seen[zone] = int(text)
            total_uj += uj
            if zone in self.last:
                span_text = read_text(zone / "max_energy_range_uj") or ""
                span = int(span_text) if span_text.isdigit() else 0  # unknown: a wrap reads as no rise
                rise_uj += uj - self.last[zone] if uj >= self.last[zone] else max(0, uj + span - self.last[zone])  # one wrap between readings
        power = rise_uj * 1e-6 / ((now - self.at) * 1e-9) if self.at is not None and now > self.at and seen.keys() == self.last.keys() else None
        self.last, self.at = seen, now
        # A package's counter wraps at max_energy_range_uj (262 kJ on many parts: 44 min at 100 W),
        # so a session's raw sums cannot be differenced across a wrap; its rises can.
        self.counted_uj += rise_uj
        return RaplReading(total_uj * 1e-6, power, len(self.zones), counted_j=self.counted_uj * 1e-6)
