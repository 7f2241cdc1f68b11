"""The GPU reader for this machine: NVML's where it finds an NVIDIA GPU, else amdgpu's sysfs
(monitors/gpu_amd.py), else i915's or xe's (monitors/gpu_intel.py), else an Apple-silicon Mac's
IORegistry (monitors/gpu_apple.py); where none finds one, n/a with each one's reason. Each has
NvmlReader's interface (read, process_memory, close, ok, reason). One vendor a machine: a box with
an NVIDIA card beside an Intel iGPU is read through NVML alone."""

from __future__ import annotations

from pathlib import Path

from monitors.gpu import NvmlDumpReader, NvmlReader
from monitors.gpu_amd import AmdSysfsReader
from monitors.gpu_apple import AppleReader
from monitors.gpu_intel import IntelSysfsReader


def readers(nvml=None, root: str | Path = "/") -> list:
    """Every vendor's reader, found or not (`tokentop probe` lists each with what it read or why not).
    From a folder, NVML's figures are those a dump holds: the live driver is this machine's."""
    nvml_reader = NvmlReader(nvml) if Path(root) == Path("/") else NvmlDumpReader(root)
    return [nvml_reader, AmdSysfsReader(root), IntelSysfsReader(root), AppleReader(root)]


def gpu_reader(nvml=None, root: str | Path = "/"):
    """`nvml`: an NVML module to use instead of pynvml (tests); `root`: where the sysfs tree starts."""
    every = readers(nvml, root)
    chosen = next((r for r in every if r.ok), None)
    for r in every:
        if r is not chosen:
            r.close()
    if chosen is not None:
        return chosen
    last = every[-1]
    last.reason = "n/a: " + "; ".join(r.reason.removeprefix("n/a: ") for r in every)
    return last
