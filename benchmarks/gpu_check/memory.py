"""The checks of the allocator's instruments on CUDA: allocated and reserved against memory_stats,
the counters that mean trouble, and the allocator's history leakcheck records for memory_viz."""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu_check import ROOT, MiB
from benchmarks.gpu_check.report import Failed, agree, one_line


def check_torch_memory(device: str) -> tuple[str, str]:
    import torch

    from monitors.torch_memory import TROUBLE, read_torch_memory

    before = read_torch_memory(device)
    x = torch.empty(64 * MiB, dtype=torch.uint8, device=device)
    during = read_torch_memory(device)
    stats = torch.cuda.memory_stats(device)
    del x
    if during is None or before is None:
        raise Failed("read_torch_memory gave None on CUDA")
    ref = (stats["allocated_bytes.all.current"], stats["reserved_bytes.all.current"])
    if (during.allocated, during.reserved) != ref:
        raise Failed("allocated/reserved differ from memory_stats", f"{during.allocated}/{during.reserved}", f"{ref[0]}/{ref[1]}")
    missing = [k for k in TROUBLE if k not in stats]
    if missing:
        raise Failed("memory_stats lacks the trouble counters the memory pane reads", ", ".join(missing), ", ".join(TROUBLE))
    if during.trouble != {k: int(stats[k]) for k in TROUBLE if stats[k]}:
        raise Failed("the trouble counters differ from memory_stats", str(during.trouble), str({k: stats[k] for k in TROUBLE}))
    agree(during.allocated - before.allocated, 64 * MiB, 0, what="a 64 MiB tensor's allocated bytes")
    figure = f"allocated {during.allocated / MiB:.1f} MiB, reserved {during.reserved / MiB:.1f} MiB, +64.0 MiB for a 64 MiB tensor"
    figure += f"; trouble {during.trouble or 'none'}"
    return figure, "torch.cuda.memory_stats, the tensor's size"


def check_device_calls(device: str) -> tuple[str, str]:
    """The engine's sync and allocator calls through torch.accelerator where this torch has its
    memory calls, and a step's GPU clock from torch.Event (engine/devices.py): 20 matmuls timed by
    it, against torch.cuda.Event's around the same work."""
    import torch

    from monitors.torch_memory import accelerator
    from tui_app.engine.decoding import GpuClock

    via = "torch.accelerator" if accelerator(device, torch) is not None else "torch.cuda"
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "memory_stats") and via != "torch.accelerator":
        raise Failed("this torch has torch.accelerator's memory calls, and the engine does not take them", via, "torch.accelerator")
    clock = GpuClock.on(device)
    if clock is None:
        raise Failed("GpuClock.on gave None on CUDA: a step's time would be the host's launches", "None", "torch.Event's timing")
    a = torch.randn(4096, 4096, device=device)
    ref = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    clock.start.record()
    ref[0].record()
    for _ in range(20):
        a = a @ a / 64
    ref[1].record()
    clock.end.record()
    torch.cuda.synchronize()
    ours, theirs = agree(clock.ns() / 1e6, ref[0].elapsed_time(ref[1]), 0.05, 0.05, " ms", "20 matmuls' GPU time")
    return f"calls through {via}; GPU clock {ours}", f"torch.cuda.Event: {theirs}"


def check_cuda_snapshot(folder: Path, device: str) -> tuple[str, str]:
    """`leakcheck --demo-leak 1 --cuda-snapshot FILE` on CUDA (the engine's History command, as the
    app's H key sends it): exit 1 (suspected), the path said, and the file is
    the snapshot memory_viz reads, its trace holding the 1 MiB blocks the demo leak kept, one a run
    from the first run after the warm-up, allocated at the demo leak's line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leak.pickle"
        cmd = [sys.executable, "-m", "tui_app", "leakcheck", "--model", str(folder), "--device", device, "--runs", "14", "--max-new-tokens", "2"]
        cmd += ["--demo-leak", "1", "--cuda-snapshot", str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        if done.returncode != 1:
            raise Failed(f"leakcheck exited {done.returncode}: {one_line(done.stderr[-600:])}", "exit 1 (suspected)")
        if f"CUDA allocator history of runs 4-14: {path}" not in done.stderr:  # the engine's window, as the app's H key records it
            raise Failed("leakcheck did not say where the history went", one_line(done.stderr[-300:]), f"CUDA allocator history of runs 4-14: {path}")
        snap = pickle.loads(path.read_bytes())
    if not {"segments", "device_traces"} <= set(snap):
        raise Failed("the snapshot is not memory_viz's format", ", ".join(sorted(snap)), "segments, device_traces")
    kept = [
        e
        for trace in snap["device_traces"]
        for e in trace
        if e.get("action") == "alloc" and e.get("size") == MiB and any(f.get("name") == "demo_leak" for f in e.get("frames") or ())
    ]
    if len(kept) != 11:
        raise Failed("the demo leak's allocations in the trace", f"{len(kept)} of 1 MiB at demo_leak", "11 (runs 4-14)")
    return f"{len(kept)} blocks of 1 MiB at demo_leak in the trace, {len(snap['segments'])} segments", "the runs after the warm-up, the demo leak's size"
