"""What a soak measures of the UI's memory (benchmarks/terminal/soak.py): a series' trend per minute with its
interval, fitted as the leak detector fits baselines, the parts of this process's RSS (glibc's heap
in use, pymalloc's arenas, the Python objects in them), and where traced Python memory grew."""

from __future__ import annotations

import ctypes
import math
import os
import re
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass

from monitors.leaks import fit_slope, t_quantile_975
from monitors.system import glibc

FLAT_MIB_PER_MIN = 0.1  # an RSS trend wholly above this is a leak: 6 MiB an hour


@dataclass
class Trend:
    """A series' least-squares slope per minute and its 95 % interval, fitted as monitors/leaks.py
    fits the baseline after each run, over samples taken at equal intervals."""

    name: str
    slope: float
    low: float
    high: float
    first: float
    last: float

    @classmethod
    def of(cls, name: str, values: list[float], every_s: float) -> Trend:
        if len(values) < 3:
            return cls(name, math.nan, math.nan, math.nan, values[0] if values else math.nan, values[-1] if values else math.nan)
        slope, se = fit_slope(values)
        half = t_quantile_975(len(values) - 2) * se
        per_min = 60.0 / every_s
        return cls(name, slope * per_min, (slope - half) * per_min, (slope + half) * per_min, values[0], values[-1])

    @property
    def flat(self) -> bool:
        return not self.low > FLAT_MIB_PER_MIN

    def text(self) -> str:
        return f"{self.name} {self.first:.0f} → {self.last:.0f} MiB, {self.slope:+.3f} MiB/min, 95% [{self.low:+.3f}, {self.high:+.3f}]"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_MALLINFO2 = glibc("mallinfo2")  # glibc 2.33 and later
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _Mallinfo2
_PYMALLOC = {"arenas": re.compile(r"# arenas allocated current\s*=\s*([\d,]+)"), "used": re.compile(r"# bytes in allocated blocks\s*=\s*([\d,]+)")}
ARENA_MIB = 1.0  # pymalloc's arena since Python 3.10


def heap_parts() -> tuple[float, float, float]:
    """What this process's RSS is made of, in MiB: (C heap in use, by glibc's own count; pymalloc's
    arenas, mapped whole; the Python objects inside them). RSS that rises with all three flat is
    neither live memory nor fragmentation we hold; arenas rising with the objects flat is
    fragmentation (an arena is given back only when every object in it is freed)."""
    malloc = math.nan
    if _MALLINFO2 is not None:
        info = _MALLINFO2()
        malloc = (info.uordblks + info.hblkhd) / 2**20
    # Only sys._debugmallocstats tells pymalloc's arenas, and only on C's stderr.
    with tempfile.TemporaryFile(mode="w+") as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    found = {key: rx.search(text) for key, rx in _PYMALLOC.items()}
    if None in found.values():
        return malloc, math.nan, math.nan
    arenas, used = (int(m.group(1).replace(",", "")) for m in found.values())
    return malloc, arenas * ARENA_MIB, used / 2**20


def growth(before, traced_start: int) -> list[str]:
    """Where traced Python memory grew since `before` (a snapshot at the warm-up's end), largest first."""
    if before is None:
        return []
    stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
    traced_end = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return [f"Python objects (traced): {traced_start / 2**20:.1f} → {traced_end / 2**20:.1f} MiB"] + [
        f"{st.size_diff / 2**20:+.2f} MiB in {st.count_diff:+d} blocks at "
        + " < ".join(f"{os.path.basename(fr.filename)}:{fr.lineno}" for fr in list(st.traceback)[-4:])
        for st in stats[:12]
    ]
