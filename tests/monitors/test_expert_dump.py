"""SGLang's and lmdeploy's expert-load dumps read without torch (monitors/expert_dump.py): the
files are written by torch.save, as each server's recorder writes them (tests/helpers/expert_recorder.py,
their layouts), and each reading is held against torch's own sum of the same tensor."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from monitors.expert_dump import DumpError, read_dump
from tests.helpers.expert_recorder import BUFFER, EXPERTS, LAYERS, TOP_K, Recorder


def save(path: Path, logical_count, **extra) -> str:
    torch.save({"rank": 0, "logical_count": logical_count, "average_utilization_rate_over_window": None, **extra}, path)
    return str(path)


def test_a_recorders_dump_reads_as_torchs_own_sum_of_its_passes(tmp_path):
    rec = Recorder(str(tmp_path))
    rec.start()
    for positions in (8, 1, 1, 1, 1):  # a prefill of 8, then four decodes
        rec.forward(positions)
    rec.dump()
    (pt,) = tmp_path.glob("expert_distribution_recorder_*.pt")
    (side,) = tmp_path.glob("standin-*.json")
    dump, truth = read_dump(str(pt)), json.loads(side.read_text())
    assert dump.counts == truth["counts"] and dump.passes == truth["passes"] == 5
    assert all(sum(layer) == 12 * TOP_K for layer in dump.counts)  # 12 positions, top-k each
    # the last pass: one position, TOP_K experts in each layer
    assert dump.last_hits == LAYERS * TOP_K and dump.utilization is None


def test_lmdeploys_dump_reads_as_its_counts_with_its_passes(tmp_path):
    rec = Recorder(str(tmp_path), "lmdeploy")
    rec.start()
    for positions in (8, 1, 1):
        rec.forward(positions)
    rec.dump()
    (pt,) = tmp_path.glob("rank0_step3_expert_counts.pt")
    (side,) = tmp_path.glob("standin-*.json")
    dump, truth = read_dump(str(pt)), json.loads(side.read_text())
    assert dump.counts == truth["counts"] and all(sum(layer) == 10 * TOP_K for layer in dump.counts)
    assert dump.passes == 3 and dump.last_hits is None  # a sum keeps no pass of its own
    counts = torch.zeros(2, 2, 2, dtype=torch.long)
    torch.save({"counts": counts, "step": 1}, tmp_path / "3d.pt")
    with pytest.raises(DumpError, match=r"counts is not a tensor of \[layers, experts\]"):
        read_dump(str(tmp_path / "3d.pt"))


def test_a_full_circular_buffer_its_every_pass_and_the_counts_summed(tmp_path):
    rec = Recorder(str(tmp_path))
    rec.start()
    for _ in range(BUFFER + 10):  # wraps: the buffer keeps the last BUFFER passes
        rec.forward(1)
    rec.dump()
    (pt,) = tmp_path.glob("*.pt")
    dump = read_dump(str(pt))
    assert dump.passes == BUFFER and all(sum(layer) == BUFFER * TOP_K for layer in dump.counts)


@pytest.mark.parametrize("form", ["int64", "strided", "offset"])
def test_other_layouts_of_the_same_counts(tmp_path, form):
    """A long count, a tensor whose strides are not its rows' (transposed in storage), and a
    slice of a larger storage: each reads as torch sums it."""
    counts = torch.randint(0, 50, (6, LAYERS, EXPERTS), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    counts[2] = 0  # an unused pass
    if form == "int64":
        t = counts.long()
    elif form == "strided":
        t = counts.transpose(1, 2).contiguous().transpose(1, 2)
        assert not t.is_contiguous()
    else:
        t = torch.cat([torch.ones((3, LAYERS, EXPERTS), dtype=torch.int32), counts])[3:]
        assert t.storage_offset() > 0
    dump = read_dump(save(tmp_path / "d.pt", t))
    assert dump.counts == counts.sum(0).tolist() and dump.passes == 5


def test_what_is_not_a_stat_dump_is_refused_with_one_line(tmp_path):
    per_token = tmp_path / "per_token.pt"
    torch.save({"records": [], "last_physical_to_logical_map": torch.zeros(2, 3, dtype=torch.int32)}, per_token)
    with pytest.raises(DumpError, match=r"no logical_count nor counts .*per_token"):
        read_dump(str(per_token))
    with pytest.raises(DumpError, match="not integers"):
        read_dump(save(tmp_path / "f.pt", torch.zeros(2, 2, 2)))
    with pytest.raises(DumpError, match=r"not a tensor of \[passes, layers, experts\]"):
        read_dump(save(tmp_path / "2d.pt", torch.zeros(2, 2, dtype=torch.int32)))
    garbled = tmp_path / "garbled.pt"
    garbled.write_bytes(b"not a zip")
    with pytest.raises(DumpError, match="unreadable"):
        read_dump(str(garbled))
    with pytest.raises(DumpError, match="unreadable"):
        read_dump(str(tmp_path / "absent.pt"))


def test_a_storage_cut_short_is_refused(tmp_path):
    src = save(tmp_path / "d.pt", torch.ones((2, LAYERS, EXPERTS), dtype=torch.int32))
    cut = tmp_path / "cut.pt"
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(cut, "w") as out:
        for name in z.namelist():
            data = z.read(name)
            out.writestr(name, data[:-6] if name.endswith("/data/0") else data)
    with pytest.raises(DumpError, match=r"cut short|do not fit"):
        read_dump(str(cut))


class Payload:
    """What a hostile file could hold: a pickle that calls a function of its choosing when loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_naming_any_other_callable_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile.pt"
    buf = io.BytesIO()
    pickle.dump({"logical_count": Payload(marker)}, buf, protocol=2)
    with zipfile.ZipFile(hostile, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
    with pytest.raises(DumpError, match=r"names (io|builtins|__builtin__)\.open, which no expert dump holds"):
        read_dump(str(hostile))
    assert not marker.exists()
