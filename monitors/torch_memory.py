"""The torch allocator's view of memory, read inside the engine process (it owns the tensors)."""

from __future__ import annotations

from monitors.events import TorchMemory


def read_torch_memory(device: str) -> TorchMemory | None:
    """None on CPU: torch has no caching allocator there whose numbers mean anything beyond RSS."""
    if not device.startswith("cuda"):
        return None
    import torch

    return TorchMemory(
        device,
        int(torch.cuda.memory_allocated(device)),
        int(torch.cuda.memory_reserved(device)),
        int(torch.cuda.max_memory_allocated(device)),
    )
