"""NVML's GPM counters and clock-event reasons (monitors/gpu_counters.py) under a tensor-core
load: GPM's SM-active and tensor-active must show the load on a Hopper or later GPU, and the
clock events tokentop names must be the ones nvidia-smi reports active at the same moment."""

from __future__ import annotations

import time

from benchmarks.gpu_check.checks import matmul_load, smi
from benchmarks.gpu_check.report import Failed


def check_gpm_and_clock_events(device: str) -> tuple[str, str]:
    import torch

    from monitors.gpu import NvmlReader
    from monitors.gpu_counters import CLOCK_EVENTS

    index = torch.cuda.current_device()
    with matmul_load(device):
        reader = NvmlReader()
        reader.read()  # GPM's first sample opens the interval
        time.sleep(1.0)
        g = reader.read().gpus[index]
        bits = int(smi("--query-gpu=clocks_event_reasons.active")[index][0], 16)
        supported = reader.gpm[index].supported
        reader.close()
    theirs = [name for bit, name in CLOCK_EVENTS.items() if bits & bit]
    if (g.slowed or []) != theirs:
        raise Failed("clock events against nvidia-smi's, read just after", str(g.slowed), str(theirs))
    hopper = torch.cuda.get_device_capability(device)[0] >= 9
    if not supported:
        if hopper:
            raise Failed("GPM unsupported on a Hopper or later GPU", "no GPM", "GPM counters")
        return f"no GPM (before Hopper); slowed by {theirs or 'nothing'}", f"nvidia-smi clocks_event_reasons.active {bits:#x}"
    figure = f"DRAM {g.dram_pct}%, SM active {g.sm_active_pct}%, tensor {g.tensor_pct}%; slowed by {theirs or 'nothing'}"
    if (g.sm_active_pct or 0) < 50 or (g.tensor_pct or 0) < 10 or g.dram_pct is None:
        raise Failed("GPM under a bf16 matrix-product load", figure, "SM active ≥ 50 %, tensor active ≥ 10 %, a DRAM %")
    return figure, f"a bf16 8192² matmul loop; nvidia-smi clocks_event_reasons.active {bits:#x}"
