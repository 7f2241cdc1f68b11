"""monitors/leak_sites.py against leaks made here, on purpose, at known lines."""

from __future__ import annotations

import inspect

import torch

from monitors.leak_sites import MB, LeakSites


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _runs(sites: LeakSites, keep: list, make, runs: int = 8) -> None:
    for _ in range(runs):
        keep.append(make())
        _ = [bytearray(4096) for _ in range(50)]  # freed each run: not a leak
        sites.baseline()


def _python_block():
    return bytearray(2 * MB)


def _tensor_block():
    return torch.zeros(MB // 4, dtype=torch.float32)  # 1 MiB of storage


def test_a_growing_python_allocation_and_a_growing_tensor_are_named_by_their_lines_and_rates():
    for make, heap, text, mb in ((_python_block, "python", "bytearray(2 * MB)", 2.0), (_tensor_block, "torch", "torch.zeros(", 1.0)):
        keep: list = []
        with LeakSites(warmup=2) as sites:
            _runs(sites, keep, make)
            grown = sites.grown()
        top = grown[0]
        assert (top.file, top.line, top.heap) == (__file__, _line_of(make, text), heap), grown
        assert abs(top.mb_per_run - mb) < 0.01 and top.blocks_per_run == (2 if heap == "python" else 1)
        assert f"{__file__}:{_line_of(_runs, 'keep.append(make())')}" in top.stack  # the caller that keeps it
        assert (sites.first.run, sites.last.run) == (3, 8)


def test_no_growth_names_nothing_and_one_reading_is_no_trend():
    keep: list = []
    with LeakSites(warmup=2) as sites:
        _runs(sites, keep, lambda: None)
        assert sites.grown() == []
        fresh = LeakSites(warmup=0)
        fresh.baseline()
        assert fresh.grown() == []
    assert sites.mode is None and not sites.started_here


class _Kept:
    """An object a leak keeps: gc counts it by its type."""


def test_gc_names_the_type_of_the_objects_kept_and_how_many_a_run():
    keep: list = []
    with LeakSites(warmup=2) as sites:
        _runs(sites, keep, lambda: [_Kept(), _Kept(), _Kept()])
        grown = dict(sites.grown_types())
    assert grown[f"{__name__}._Kept"] == 3.0 and grown["list"] >= 1.0
