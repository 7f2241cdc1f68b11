"""The torch allocator's view of memory, read inside the engine process (it owns the tensors)."""

from __future__ import annotations

from monitors.events import TorchMemory


def read_torch_memory(device: str, more: tuple[str, ...] = ()) -> TorchMemory | None:
    """None on CPU: torch has no caching allocator there whose numbers mean anything beyond RSS.
    `more`: the other GPUs of a model placed over several (--device-map), summed in."""
    if not device.startswith("cuda"):
        return None
    import torch

    devices = (device, *(d for d in more if d != device))
    return TorchMemory(
        device="+".join(devices),
        allocated=sum(int(torch.cuda.memory_allocated(d)) for d in devices),
        reserved=sum(int(torch.cuda.memory_reserved(d)) for d in devices),
        peak=sum(int(torch.cuda.max_memory_allocated(d)) for d in devices),
    )
