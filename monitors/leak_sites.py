"""Where a rising baseline grows: the allocating lines, at each after-run baseline, diffed.

Two sources, because a leak lives in one of two heaps:
- Python's heap, by tracemalloc: every block Python's allocators hand out (objects, bytes,
  bytearrays, numpy's buffers), by the line that allocated it (`Snapshot.compare_to`).
- torch's, outside tracemalloc's sight: a tensor's storage comes from c10's allocator and its
  Python object is not traced either (`get_object_traceback` gives None). So a TorchFunctionMode
  marks each tensor a torch call returns with the calling lines outside torch; the live tensors
  (gc's view) are summed by that mark, weighed by their storage's bytes, and diffed the same way.

Beside them, gc's count of live objects by type (one pass with the tensors'): a leak that keeps
a dict or an instance a run shows as that type climbing.

Both slow the engine (every allocation and every torch call pays): they run only where asked for
(`leakcheck`, a check whose speed is not its point), in the thread that runs the engine, and a
reading is taken at a baseline, never mid-run. Importable without torch.
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

MB = 1024 * 1024
FRAMES = 8  # enough to see past a library's own frames to the caller that holds the leak
# A site must grow at least this much a run to be named: a dict resizing once is not a leak.
FLOOR_MB_PER_RUN = 0.01
# The readings' own memory (this file's) is kept between baselines, so it would read as growth.
HIDE = (tracemalloc.__file__, __file__, "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>", "<unknown>")
MARK = "_tokentop_site"  # the attribute a tensor's calling lines are kept in


@dataclass
class Site:
    """One allocating line and what it kept a run between the first and last baselines read."""

    file: str
    line: int
    heap: str  # "python" (tracemalloc) or "torch" (tensor storage, by the line that made the tensor)
    mb_per_run: float
    blocks_per_run: float
    stack: list[str] = field(default_factory=list)  # innermost first: "file:line"

    def text(self) -> str:
        what = "Python heap" if self.heap == "python" else "tensor storage"
        return f"{self.file}:{self.line}  {self.mb_per_run:+.2f} MB/run  {what}, {self.blocks_per_run:+.1f} blocks/run"

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("file", "line", "heap", "mb_per_run", "blocks_per_run", "stack")}


@dataclass
class _Reading:
    run: int
    python: tracemalloc.Snapshot
    tensors: dict[tuple, tuple[int, int]]  # traceback key → (bytes, tensors)
    types: Counter  # gc's live objects by type (containers and instances: gc does not track bytes or numbers)


class LeakSites:
    """Readings at baselines; `grown()` diffs the first after `warmup` against the latest."""

    def __init__(self, warmup: int = 3, frames: int = FRAMES, runs: int = 0):
        """runs: those done before this reads its first baseline, so its readings carry the run's number."""
        self.warmup = warmup
        self.frames = frames
        self.runs = runs
        self.first: _Reading | None = None
        self.last: _Reading | None = None
        self.started_here = False
        self.mode = None
        # Each reading's count by type, first to last: a type must grow at every one. Kept as tuples of
        # names and numbers, which gc untracks, so the history is not counted as growth of its own.
        self.type_counts: list[tuple[tuple[str, int], ...]] = []

    def start(self) -> None:
        """Tracing from now on, in this thread; the torch half only where torch is loaded."""
        if not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)
            self.started_here = True
        torch = sys.modules.get("torch")  # never imported here: monitors stay free of torch
        if torch is not None and self.mode is None:
            mode = _marker(torch, self.frames)
            mode.__enter__()
            self.mode = mode

    def stop(self) -> None:
        if self.started_here:
            tracemalloc.stop()
            self.started_here = False
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None

    def __enter__(self) -> LeakSites:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def baseline(self) -> None:
        """A reading at the baseline just taken (after the run's end and its gc.collect)."""
        self.runs += 1
        if self.runs <= self.warmup or not tracemalloc.is_tracing():
            return
        # The readings' own objects are not the engine's: only the first is kept beside the new one,
        # and the objects are counted before this reading's snapshot is made (the earlier one's
        # traces, tuples of numbers and names, gc untracked in the run's collection).
        if self.last is not self.first:
            self.last = None
        live = _live()
        reading = _Reading(self.runs, tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, f) for f in HIDE]), *live)
        if self.first is None:
            self.first = reading
        self.last = reading
        self.type_counts.append(tuple(reading.types.items()))

    def grown(self, top: int = 5) -> list[Site]:
        """The sites that grew most a run, largest first; empty before two readings."""
        a, b = self.first, self.last
        if a is None or b is None or b.run == a.run:
            return []
        runs = b.run - a.run
        sites = []
        for d in b.python.compare_to(a.python, "traceback"):
            if d.size_diff / runs / MB >= FLOOR_MB_PER_RUN:
                sites.append(_site(d.traceback, "python", d.size_diff / runs, d.count_diff / runs))
        for key, (nbytes, count) in b.tensors.items():
            was_bytes, was_count = a.tensors.get(key, (0, 0))
            if (nbytes - was_bytes) / runs / MB >= FLOOR_MB_PER_RUN:
                sites.append(_site(key, "torch", (nbytes - was_bytes) / runs, (count - was_count) / runs))
        return sorted(sites, key=lambda s: -s.mb_per_run)[:top]

    def grown_types(self, top: int = 5) -> list[tuple[str, float]]:
        """The object types whose live count grew most a run, (type, objects a run), largest first;
        a type must gain at least one object a run, and some at every reading: a cache filled once
        (5 regex patterns in a traced run's first steps) is not a leak."""
        a, b = self.first, self.last
        if a is None or b is None or b.run == a.run:
            return []
        runs = b.run - a.run
        counts = [dict(c) for c in self.type_counts]
        steady = [n for n in b.types if all(later.get(n, 0) > earlier.get(n, 0) for earlier, later in itertools.pairwise(counts))]
        grown = [(name, (b.types[name] - a.types.get(name, 0)) / runs) for name in steady]
        return sorted([g for g in grown if g[1] >= 1], key=lambda g: -g[1])[:top]


def _site(frames, heap: str, bytes_per_run: float, blocks_per_run: float) -> Site:
    # tracemalloc keeps a traceback oldest frame first, the marks innermost first; a site is named by its innermost.
    stack = [f"{f.filename}:{f.lineno}" for f in reversed(frames)] if heap == "python" else [f"{f}:{n}" for f, n in frames]
    file, line = stack[0].rsplit(":", 1)
    return Site(file, int(line), heap, bytes_per_run / MB, blocks_per_run, stack)


def _marker(torch: Any, frames: int) -> Any:
    """A TorchFunctionMode that marks each tensor a torch call returns, once, with the lines that
    called it from outside torch (innermost first)."""
    inside = os.path.dirname(torch.__file__)

    class Marker(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and MARK not in out.__dict__:
                f: FrameType | None = sys._getframe(1)
                while f is not None and f.f_code.co_filename.startswith(inside):
                    f = f.f_back
                stack: list[tuple[str, int]] = []
                while f is not None and len(stack) < frames:
                    stack.append((f.f_code.co_filename, f.f_lineno))
                    f = f.f_back
                out.__dict__[MARK] = tuple(stack)
            return out

    return Marker()


def _live() -> tuple[dict[tuple, tuple[int, int]], Counter]:
    """One pass over gc's objects: live tensors' storage bytes and count by their marks, and every
    object's type counted. A storage shared by views is counted once, at the first tensor seen of
    it. Tensors made before the marking began (the weights) have no mark: no run's allocation."""
    torch = sys.modules.get("torch")
    tensor = torch.Tensor if torch is not None else ()
    # Grouped by type with no allocation an object: this runs while tracemalloc traces, and each
    # allocation (a type's name, a count past 256) takes a traceback of FRAMES frames, their line
    # numbers found anew: 200k objects took 1-4 s a reading that way, in a test process 60 s a test.
    by_kind: dict[type, list] = {}
    for obj in gc.get_objects():
        group = by_kind.get(kind := type(obj))
        if group is None:
            by_kind[kind] = group = []
        group.append(obj)
    types: Counter = Counter({(k.__qualname__ if k.__module__ == "builtins" else f"{k.__module__}.{k.__qualname__}"): len(g) for k, g in by_kind.items()})
    seen: set[int] = set()
    out: Counter = Counter()
    counts: Counter = Counter()
    # type(), not isinstance: no proxy's __class__ is asked
    for obj in (o for kind, group in by_kind.items() if issubclass(kind, tensor) for o in group):
        if obj.is_meta:
            continue
        key = obj.__dict__.get(MARK)
        if not key:
            continue
        try:
            storage = obj.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, a functional wrapper)
            continue
        ptr = storage.data_ptr()
        if ptr in seen or not ptr:
            continue
        seen.add(ptr)
        out[key] += storage.nbytes()
        counts[key] += 1
    return {k: (out[k], counts[k]) for k in out}, types
