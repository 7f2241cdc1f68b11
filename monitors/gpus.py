"""The GPU reader for this machine: NVML's where it finds an NVIDIA GPU, else amdgpu's sysfs
(monitors/gpu_amd.py); where neither finds one, n/a with both reasons. Each has NvmlReader's
interface (read, process_memory, close, ok, reason)."""

from __future__ import annotations

from pathlib import Path

from monitors.gpu import NvmlReader
from monitors.gpu_amd import AmdSysfsReader


def gpu_reader(nvml=None, root: str | Path = "/"):
    """`nvml`: an NVML module to use instead of pynvml (tests); `root`: where the sysfs tree starts."""
    first = NvmlReader(nvml)
    if first.ok:
        return first
    amd = AmdSysfsReader(root)
    if amd.ok:
        first.close()
        return amd
    amd.reason = f"{first.reason}; {amd.reason.removeprefix('n/a: ')}"
    return amd
