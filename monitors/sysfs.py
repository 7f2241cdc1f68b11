"""Reading a GPU's sysfs and hwmon files as its driver writes them (the vendors' probes:
monitors/gpu_amd.py, gpu_intel.py). `root` is where the tree starts: "/" on a live system, a
fixture folder in the tests and for `tokentop probe --root`. Nothing here raises: a file that
vanishes (a GPU reset, a hot unplug) or reads garbled is None, its reason kept."""

from __future__ import annotations

import time
from pathlib import Path

from monitors import drm_fdinfo
from monitors.gpu import GpuSample


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def cards(root: Path, vendor: str) -> list[Path]:
    """The `device` folders of the DRM cards of one PCI vendor ("0x1002"), connectors left out."""
    drm = root / "sys" / "class" / "drm"
    return [card / "device" for card in sorted(drm.glob("card[0-9]*")) if "-" not in card.name and read_text(card / "device" / "vendor") == vendor]


def uevent(device: Path) -> dict[str, str]:
    lines = (read_text(device / "uevent") or "").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def pdev(device: Path) -> str:
    """The PCI address fdinfo's drm-pdev names the device by."""
    return uevent(device).get("PCI_SLOT_NAME") or device.resolve().name


class Fields:
    """One device's reads, the first failure kept as its reason."""

    def __init__(self, device: Path):
        self.device = device
        self.reason = ""

    def number(self, path: Path, scale: float = 1.0) -> float | None:
        text = read_text(path)
        if text is None:
            if not self.reason:
                self.reason = f"{path.name}: unreadable (the GPU reset or was removed?)"
            return None
        try:
            return float(text) * scale
        except ValueError:
            if not self.reason:
                self.reason = f"{path.name}: not a number ({text[:40]!r})"
            return None

    def hwmon(self, *names: str) -> Path | None:
        """The first of `names` that one of the device's hwmon folders has."""
        for name in names:
            for folder in sorted((self.device / "hwmon").glob("hwmon*")):
                if (folder / name).exists():
                    return folder / name
        return None

    def labelled(self, prefix: str) -> dict[str, Path]:
        """The device's hwmon inputs of one kind ("temp"), by their label (the file's name where unlabelled)."""
        out = {}
        for folder in sorted((self.device / "hwmon").glob("hwmon*")):
            for inp in sorted(folder.glob(f"{prefix}*_input")):
                out[read_text(inp.with_name(inp.name.replace("_input", "_label"))) or inp.name] = inp
        return out


class DrmReader:
    """What the sysfs readers share: the watched processes' own memory and busy share on each card,
    from their DRM fdinfo (monitors/drm_fdinfo.py), matched to the card by its PCI address."""

    drivers: tuple[str, ...] = ()
    ok = False

    def __init__(self, root: str | Path = "/", clock=time.monotonic_ns):
        self.root, self.clock = Path(root), clock
        self.busy = drm_fdinfo.Busy(clock)
        self.buses: dict[Path, str] = {}  # each card's PCI address, read once: it does not change under a reader

    def found_cards(self, devices: list[Path]) -> None:
        self.buses = {d: pdev(d) for d in devices}
        self.ok = bool(devices)

    def found(self, pids) -> dict[tuple[str, str, str], drm_fdinfo.Client]:
        return {k: c for k, c in drm_fdinfo.clients(self.root, pids).items() if c.driver in self.drivers}

    def own(self, pids) -> tuple[dict[str, int], dict[str, float]]:
        """(device memory, busy %) the processes hold, by PCI address: once a reading."""
        found = self.found(pids)
        return drm_fdinfo.device_memory(found), self.busy.read(found)

    def finish(self, s: GpuSample, f: Fields, own: tuple[dict[str, int], dict[str, float]], pids) -> GpuSample:
        """The sample's per-process figures (None with no process watched) and its reason."""
        bus = self.buses[f.device]
        s.proc_mem = own[0].get(bus, 0) if pids else None
        s.proc_busy_pct = own[1].get(bus) if pids else None
        s.reason = f.reason
        return s

    def process_memory(self, pids: set[int] | frozenset[int]) -> int | None:
        return sum(drm_fdinfo.device_memory(self.found(pids)).values()) if self.ok else None

    def close(self) -> None:
        pass
