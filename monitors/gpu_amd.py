"""AMD GPUs through the amdgpu driver's sysfs and hwmon files, and a process's own VRAM through DRM
fdinfo: no library, no root. The files and their units are the kernel's (Documentation/gpu/amdgpu/
thermal.rst, driver-misc.rst; Documentation/gpu/drm-usage-stats.rst for fdinfo):

    device/gpu_busy_percent, mem_busy_percent    %
    device/mem_info_vram_used, mem_info_vram_total    bytes
    device/hwmon/hwmon*/power1_average, else power1_input    µW
    device/hwmon/hwmon*/freq1_input (sclk)    Hz; else the `*` line of device/pp_dpm_sclk (MHz)
    device/hwmon/hwmon*/temp*_input (edge, junction, mem)    m°C
    /proc/PID/fdinfo/*: drm-driver amdgpu, drm-pdev, drm-client-id, drm-memory-vram    KiB

`root` is where the tree starts ("/" on a live system; a fixture folder in the tests and for
`probe --root`). A file that vanishes (a GPU reset, a hot unplug) or reads garbled turns its figure
into None and names the reason in the device's `reason`; nothing here raises."""

from __future__ import annotations

from pathlib import Path

from monitors.gpu import GpuReading, GpuSample

AMD_VENDOR = "0x1002"
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "B": 1, "": 1}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


class _Fields:
    """One device's reads, the first failure kept as its reason."""

    def __init__(self, device: Path):
        self.device = device
        self.reason = ""

    def number(self, path: Path, scale: float = 1.0) -> float | None:
        text = _read(path)
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


def _sclk_mhz(device: Path) -> int | None:
    """The current shader clock from pp_dpm_sclk's starred line ("1: 2100Mhz *")."""
    for line in (_read(device / "pp_dpm_sclk") or "").splitlines():
        if line.rstrip().endswith("*"):
            digits = "".join(ch for ch in line.split(":", 1)[-1] if ch.isdigit())
            return int(digits) if digits else None
    return None


def _temperature(f: _Fields) -> float | None:
    """The hottest point the driver names (junction over edge): throttling follows it."""
    labelled = {}
    for folder in sorted((f.device / "hwmon").glob("hwmon*")):
        for inp in sorted(folder.glob("temp*_input")):
            label = _read(inp.with_name(inp.name.replace("_input", "_label"))) or inp.name
            labelled[label] = inp
    for label in ("junction", "edge", *labelled):
        if label in labelled:
            return f.number(labelled[label], 1e-3)
    return None


class AmdSysfsReader:
    """The same interface as NvmlReader: read(pids) -> GpuReading, process_memory(pids), close()."""

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)
        self.devices = []
        drm = self.root / "sys" / "class" / "drm"
        for card in sorted(drm.glob("card[0-9]*")):
            if "-" not in card.name and _read(card / "device" / "vendor") == AMD_VENDOR:
                self.devices.append(card / "device")
        self.ok = bool(self.devices)
        self.reason = "" if self.ok else f"n/a: no AMD GPU under {drm} (amdgpu's sysfs)"

    def _pdev(self, device: Path) -> str:
        for line in (_read(device / "uevent") or "").splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return line.split("=", 1)[1]
        return device.resolve().name

    def read(self, pids: set[int] | frozenset[int] = frozenset()) -> GpuReading:
        if not self.ok:
            return GpuReading(False, self.reason)
        held = fdinfo_vram(self.root, pids) if pids else {}
        gpus = []
        for i, device in enumerate(self.devices):
            f = _Fields(device)
            s = GpuSample(i, name=_read(device / "product_name") or f"AMD GPU ({device.parent.name})")
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
            s.proc_mem = held.get(self._pdev(device), 0) if pids else None
            s.reason = f.reason
            gpus.append(s)
        return GpuReading(True, "", gpus)

    def process_memory(self, pids: set[int] | frozenset[int]) -> int | None:
        if not self.ok:
            return None
        return sum(fdinfo_vram(self.root, pids).values())

    def close(self) -> None:
        pass


def fdinfo_vram(root: Path, pids) -> dict[str, int]:
    """VRAM the processes hold, bytes by PCI device, from their DRM file descriptors' fdinfo: each
    client counted once (a process may hold several descriptors of one client)."""
    seen: dict[tuple[str, str], int] = {}
    for pid in pids:
        for info in (root / "proc" / str(pid) / "fdinfo").glob("*"):
            fields = {}
            for line in (_read(info) or "").splitlines():
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
            if fields.get("drm-driver") != "amdgpu" or "drm-memory-vram" not in fields:
                continue
            number, _, unit = fields["drm-memory-vram"].partition(" ")
            if not number.isdigit() or unit not in UNITS:
                continue
            seen[(fields.get("drm-pdev", ""), fields.get("drm-client-id", info.name))] = int(number) * UNITS[unit]
    out: dict[str, int] = {}
    for (pdev, _), nbytes in seen.items():
        out[pdev] = out.get(pdev, 0) + nbytes
    return out
