"""The torch allocator's view of memory, read inside the engine process (it owns the tensors)."""

from __future__ import annotations

from monitors.events import TorchMemory

# memory_stats() counters that mean trouble: cudaMalloc failed and the cache was flushed to retry
# (fragmentation's cost, each a sync), out-of-memory errors raised, and frees that waited on every
# stream. Named as torch's documentation of torch.cuda.memory_stats names them.
TROUBLE = {"num_alloc_retries": "alloc retries", "num_ooms": "OOMs", "num_sync_all_streams": "stream syncs"}


def accelerator(device: str, torch):
    """torch.accelerator where this torch has its allocator calls (2.9 on) and runs this device's
    kind, CUDA's (ROCm's) or XPU's, as its accelerator; else None, and the backend's own module
    serves. MPS keeps its own calls: its allocator has no peak, and its figures are torch.mps's."""
    acc = getattr(torch, "accelerator", None)
    name = device.split(":")[0]
    if name not in ("cuda", "xpu") or acc is None or not hasattr(acc, "memory_stats"):
        return None
    current = acc.current_accelerator()
    return acc if current is not None and current.type == name else None


def read_torch_memory(device: str, more: tuple[str, ...] = ()) -> TorchMemory | None:
    """The caching allocator's figures on CUDA (ROCm's included) and XPU, through torch.accelerator
    where this torch has it, else through torch.cuda or torch.xpu, which share these calls; and on
    MPS its own three (tensors allocated; the Metal driver's whole allocation as reserved; Metal's
    recommended working set as the limit, the budget that unified memory gives the GPU, where the
    Apple probe has no device total. MPS keeps no peak, so this reading's allocation stands for
    it: the engine keeps the highest of a run's readings). None on CPU, where torch has no such
    allocator beyond RSS.
    `more`: the other GPUs of a model placed over several (--device-map), summed in."""
    kind = device.split(":")[0]
    if kind not in ("cuda", "xpu", "mps"):
        return None
    import torch

    if kind == "mps":
        now = int(torch.mps.current_allocated_memory())
        limit = int(torch.mps.recommended_max_memory())
        return TorchMemory(device="mps", allocated=now, reserved=int(torch.mps.driver_allocated_memory()), peak=now, limit=limit)

    backend = accelerator(device, torch) or getattr(torch, kind)
    devices = (device, *(d for d in more if d != device))
    stats = [backend.memory_stats(d) for d in devices]
    trouble = {key: n for key in TROUBLE if (n := sum(int(s.get(key, 0)) for s in stats))}
    return TorchMemory(
        device="+".join(devices),
        allocated=sum(int(backend.memory_allocated(d)) for d in devices),
        reserved=sum(int(backend.memory_reserved(d)) for d in devices),
        peak=sum(int(backend.max_memory_allocated(d)) for d in devices),
        trouble=trouble,
    )


def trouble_text(mem: TorchMemory | None) -> str:
    """ "allocator: 3 alloc retries, 1 OOMs", or "" while none happened."""
    if mem is None or not mem.trouble:
        return ""
    return "allocator: " + ", ".join(f"{n} {TROUBLE[key]}" for key, n in mem.trouble.items())


def limit_text(mem: TorchMemory | None) -> tuple[str, str] | None:
    """(the line, its short form) for the driver's allocation against Metal's recommended working
    set: "MPS 1200 of 10240 MiB Metal recommends". Past it, macOS pages the GPU's memory and torch
    refuses allocations at 1.7 times it (PYTORCH_MPS_HIGH_WATERMARK_RATIO), so the line says
    "over". None where the device names no limit (every device but MPS)."""
    if mem is None or not mem.limit:
        return None
    used, limit = mem.reserved / 2**20, mem.limit / 2**20
    if mem.reserved > mem.limit:
        return f"MPS {used:.0f} MiB: over the {limit:.0f} Metal recommends", "MPS over Metal's limit"
    return f"MPS {used:.0f} of {limit:.0f} MiB Metal recommends", f"MPS {used:.0f}/{limit:.0f} MiB"
