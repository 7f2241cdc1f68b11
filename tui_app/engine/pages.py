"""Memory on transparent huge pages (2 MiB), where Linux offers them, for the quantized weights.

Why: decode streams every weight once per token, and each 4 KiB page the stream enters costs a
TLB miss, a nested page walk under a hypervisor. Measured on the 2-core EPYC VM this was built
on, one thread: a plain read of 83 MB 17 -> 30 GB/s and the int4 kernel over the default model's
layers 17 -> 29 GB/s (standalone C++); the compiled int4 step 7.98 -> 6.62 ms. THP is commonly in
'madvise' mode, where only memory that asks for huge pages gets them, and torch's allocator asks
only under an environment variable read once when torch loads; so the pools ask themselves.
The loaded fp model moves too, but only when the compile lever first compiles it (`adopt`): its
compiled step went 26.5 -> 23.9 ms (one process, alternating), and the move's 1.3 s hides among
the compile's own seconds, where at load it cost 1.5-2 s of a 5 s start (a process's first huge
pages are slow to come).
"""

from __future__ import annotations

import contextlib
import mmap

import torch

HUGE = 2 << 20


def empty(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of `nbytes` starting on a 2 MiB boundary of memory advised for huge pages
    (the pages are taken when first written); a plain torch.empty where there is no THP."""
    if nbytes < HUGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(nbytes, dtype=torch.uint8)
    size = nbytes + HUGE  # room to start on a boundary
    # Private: THP serves private anonymous memory; a shared mapping is shmem, which it usually does not.
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(region, dtype=torch.uint8)  # keeps `region` mapped while any view of it lives
    start = -base.data_ptr() % HUGE
    with contextlib.suppress(OSError):  # a kernel without THP: the same memory on small pages
        region.madvise(mmap.MADV_HUGEPAGE, start, size - start)
    return base[start : start + nbytes]


def adopt(module: torch.nn.Module) -> None:
    """Move `module`'s parameters into one region on huge pages, in place: each Parameter object
    stays (tied weights stay tied, and every module sharing one sees the move); the old memory is
    freed when nothing else holds it."""
    params = list({id(p): p for p in module.parameters()}.values())
    starts, end = [], 0
    for p in params:
        starts.append(end)
        end += -(-p.numel() * p.element_size() // 64) * 64  # each start aligned for any dtype
    with torch.inference_mode(False), torch.no_grad():  # normal tensors, usable in and out of inference mode
        region = empty(end)
        for p, start in zip(params, starts, strict=True):
            home = region[start : start + p.numel() * p.element_size()].view(p.dtype).view(p.shape)
            home.copy_(p)
            p.data = home
