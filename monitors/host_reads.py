"""Counting the points where the host waits for a tensor's value: on a GPU each is a device→host sync.

Two counts. `reads` works on any device: every `.tolist()`, `.numpy()` or `.cpu()` called from
Python, and every `aten::_local_scalar_dense` or `aten::nonzero` dispatched, from Python or C++
(`.item()`, `bool(t)`, `int(t)`, a tensor used as an index, boolean indexing), seen by the torch
profiler. On a CPU nothing waits, but the same code on CUDA syncs at each of these, so the count
says how many syncs a loop would pay there. `syncs` is the count CUDA itself reports
(`torch.cuda.set_sync_debug_mode`, one warning per synchronizing call), None off CUDA.

Both slow what runs under them: for counting runs, not timed ones.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass, field

PY_READS = ("tolist", "numpy", "cpu")
ATEN_READS = frozenset({"aten::_local_scalar_dense", "aten::nonzero"})
CUDA_SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass
class HostReads:
    reads: int = 0
    syncs: int | None = None
    # "file.py:line" → CUDA syncs there: the Python line whose call synchronized (the warning's own place)
    sync_sites: Counter = field(default_factory=Counter)

    def per_token(self, tokens: int) -> tuple[float, float | None]:
        return self.reads / tokens, None if self.syncs is None else self.syncs / tokens

    def sites_text(self, top: int = 4) -> str:
        return ", ".join(f"{site} ×{n}" for site, n in self.sync_sites.most_common(top))


class count_host_reads:
    """`with count_host_reads(cuda=...) as n: loop()`, then `n.reads` (and `n.syncs` with cuda)."""

    def __init__(self, cuda: bool = False):
        self.cuda = cuda
        self.result = HostReads()

    def _wrap(self, tensor_cls, name: str) -> None:
        method = getattr(tensor_cls, name)

        def read(tensor, *args, **kwargs):
            self.result.reads += 1
            return method(tensor, *args, **kwargs)

        setattr(tensor_cls, name, read)

    def __enter__(self) -> HostReads:
        import torch
        from torch.profiler import ProfilerActivity, profile

        if own := [name for name in PY_READS if name in vars(torch.Tensor)]:
            raise RuntimeError(f"torch.Tensor defines {own} itself: removing the wrappers would lose them")
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.filterwarnings("always", message=CUDA_SYNC_WARNING)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # else kineto prints two lines per count on stderr
        self._prof = profile(activities=[ProfilerActivity.CPU])
        self._prof.__enter__()
        # Wrapped on the class while counting (they are inherited from TensorBase, so removing the
        # wrappers restores them): a tracing hook (sys.setprofile) would see these calls too, but
        # makes dynamo recompile what the compile lever warmed.
        for name in PY_READS:
            self._wrap(torch.Tensor, name)
        return self.result

    def __exit__(self, *exc) -> None:
        import torch

        for name in PY_READS:
            delattr(torch.Tensor, name)
        self._prof.__exit__(*exc)
        self.result.reads += sum(e.count for e in self._prof.key_averages() if e.key in ATEN_READS)
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            self._warnings.__exit__(*exc)
            syncs = [w for w in self._caught if CUDA_SYNC_WARNING in str(w.message)]
            self.result.syncs = len(syncs)
            self.result.sync_sites = Counter(f"{os.path.basename(w.filename)}:{w.lineno}" for w in syncs)
