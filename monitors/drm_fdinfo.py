"""A process's own use of its GPUs through DRM fdinfo (the kernel's Documentation/gpu/
drm-usage-stats.rst), as amdgpu, i915 and xe write it: no library, no root, on any vendor's GPU.

    drm-driver, drm-pdev, drm-client-id                     who: one client may show in several descriptors
    drm-resident-<region>, else drm-total-<region>,
      else amdgpu's older drm-memory-<region>               KiB / MiB / GiB
    drm-engine-<engine>: N ns, drm-engine-capacity-<engine>  busy time (amdgpu, i915)
    drm-cycles-<class>, drm-total-cycles-<class>            busy cycles over the GPU's timestamp (xe)

The device's own memory is the regions named vram* (amdgpu, xe) or local* (i915); system, gtt,
cpu and stolen are host memory. A busy share needs two readings: `Busy` keeps the last one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "B": 1, "": 1}
DEVICE_REGIONS = ("vram", "local")


@dataclass
class Client:
    driver: str
    pdev: str
    memory: dict[str, int] = field(default_factory=dict)  # bytes by region
    engine_ns: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, tuple[int, int]] = field(default_factory=dict)  # class: (busy, the GPU's timestamp)

    @property
    def device_memory(self) -> int:
        return sum(n for region, n in self.memory.items() if region.startswith(DEVICE_REGIONS))


def _fields(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return {}  # the descriptor closed between the listing and the read
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _amount(value: str) -> int | None:
    number, _, unit = value.partition(" ")
    return int(number) * UNITS[unit] if number.isdigit() and unit in UNITS else None


def _client(f: dict[str, str]) -> Client:
    c = Client(f["drm-driver"], f.get("drm-pdev", ""))
    for prefix in ("drm-memory-", "drm-total-", "drm-resident-"):  # the later, the truer: resident over total over amdgpu's older key
        for key, value in f.items():
            if key.startswith(prefix) and not key.startswith("drm-total-cycles-") and (n := _amount(value)) is not None:
                c.memory[key.removeprefix(prefix)] = n
    for key, value in f.items():
        if key.startswith("drm-engine-capacity-") and value.isdigit():
            c.capacity[key.removeprefix("drm-engine-capacity-")] = int(value)
        elif key.startswith("drm-engine-") and value.endswith(" ns") and value[:-3].isdigit():
            c.engine_ns[key.removeprefix("drm-engine-")] = int(value[:-3])
        elif key.startswith("drm-cycles-") and value.isdigit():
            total = f.get("drm-total-cycles-" + key.removeprefix("drm-cycles-"), "")
            if total.isdigit():
                c.cycles[key.removeprefix("drm-cycles-")] = (int(value), int(total))
    return c


def clients(root: Path, pids: Iterable[int]) -> dict[tuple[str, str, str], Client]:
    """The processes' DRM clients, each once, by (driver, pdev, client id)."""
    out: dict[tuple[str, str, str], Client] = {}
    for pid in pids:
        for info in sorted((root / "proc" / str(pid) / "fdinfo").glob("*")):
            f = _fields(info)
            if "drm-driver" not in f:
                continue
            out[(f["drm-driver"], f.get("drm-pdev", ""), f.get("drm-client-id", f"{pid}/{info.name}"))] = _client(f)
    return out


def device_memory(found: dict[tuple[str, str, str], Client]) -> dict[str, int]:
    """Bytes of device memory the clients hold, by PCI device."""
    out: dict[str, int] = {}
    for c in found.values():
        out[c.pdev] = out.get(c.pdev, 0) + c.device_memory
    return out


class Busy:
    """The clients' busy share of each PCI device since the last reading, %: the busiest engine's,
    each engine's time over the wall time and its capacity (or its cycles over the GPU's timestamp).
    A device is absent until its second reading."""

    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.last: dict[tuple, tuple[int, int]] = {}  # (client, engine): (busy, at)

    def read(self, found: dict[tuple[str, str, str], Client]) -> dict[str, float]:
        now = self.clock()
        seen: dict[tuple, tuple[int, int]] = {}
        busy: dict[tuple[str, str], float] = {}  # (pdev, engine): %, summed over clients
        for key, c in found.items():
            for engine, (value, at) in ({e: (ns, now) for e, ns in c.engine_ns.items()} | c.cycles).items():
                seen[(key, engine)] = (value, at)
                before = self.last.get((key, engine))
                if before is None or at <= before[1] or value < before[0]:  # new, or the counter restarted
                    continue
                share = 100 * (value - before[0]) / (at - before[1]) / max(1, c.capacity.get(engine, 1))
                busy[(c.pdev, engine)] = busy.get((c.pdev, engine), 0.0) + share
        self.last = seen
        out: dict[str, float] = {}
        for (pdev, _), share in busy.items():
            out[pdev] = min(100.0, max(out.get(pdev, 0.0), share))
        return out
