"""benchmarks/engine/ceiling.py's bytes per token, for tokentop and for llama.cpp, against independent counts; where a
working set lives, by the cache sizes sysfs reports; and a ratio to a ceiling above 1 never shown alone."""

import pytest
import torch

from benchmarks.engine.ceiling import ReadRate, cache_levels, gguf_bytes_per_token, home, ratio_cell
from tui_app.engine.bandwidth import weight_bytes
from tui_app.engine.models import find_default_gguf

# GGML's block formats (ggml-common.h): weights per block, bytes per block.
BLOCKS = {"F32": (1, 4), "F16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}


def test_llama_cpp_bytes_per_token_are_the_gguf_blocks_and_an_f16_kv_cache():
    """The default GGUF (SmolLM2-135M: 30 layers, 3 KV heads of 64, head tied to the embedding):
    every tensor's blocks by GGML's formats, plus K and V in f16 for each token of context."""
    from gguf import GGUFReader

    gguf = str(find_default_gguf())
    reader = GGUFReader(gguf)
    blocks = 0
    for t in reader.tensors:
        per_block, nbytes = BLOCKS[t.tensor_type.name]
        blocks += int(t.n_elements) // per_block * nbytes
    assert "output.weight" not in {t.name for t in reader.tensors}  # tied: the table is read whole
    assert gguf_bytes_per_token(gguf, 0) == blocks
    assert gguf_bytes_per_token(gguf, 100) - blocks == 2 * 2 * 30 * 3 * 64 * 100


def test_tokentop_weight_bytes_count_a_tied_table_once(plain):
    """fp32: 4 bytes per parameter, the tied embedding/head counted once, and the rotary tables;
    int8: a byte per linear weight and a scale per row, the fp norms and rotary tables, and no
    embedding table (the int8 head has its own copy; decode reads one row of the table)."""
    from tui_app.engine.levers import quantize

    model = plain.model
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    rotary = sum(b.numel() * b.element_size() for b in model.buffers())
    assert weight_bytes(model) == 4 * sum(p.numel() for p in model.parameters()) + rotary
    q = quantize(model, "int8", "cpu", torch.float32)
    norms = sum(p.numel() for n, p in q.named_parameters() if "norm" in n)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert weight_bytes(q) == 4 * norms + rotary + sum(m.weight.numel() + 4 * m.out_features for m in linears)


def _cache_dir(root, index, level, kind, size):
    d = root / f"index{index}"
    d.mkdir()
    for name, value in (("level", level), ("type", kind), ("size", size)):
        (d / name).write_text(f"{value}\n")


def test_cache_levels_are_the_data_caches_sysfs_lists(tmp_path):
    """A hand-made sysfs tree as Linux writes it: the instruction cache left out, sizes in K."""
    _cache_dir(tmp_path, 0, 1, "Data", "48K")
    _cache_dir(tmp_path, 1, 1, "Instruction", "32K")
    _cache_dir(tmp_path, 2, 2, "Unified", "1024K")
    _cache_dir(tmp_path, 3, 3, "Unified", "32768K")
    levels = cache_levels(str(tmp_path))
    assert levels == [("L1d", 48 * 1024), ("L2", 1 << 20), ("L3", 32 << 20)]
    assert home(40 * 1024, levels) == "L1d"
    assert home(1 << 20, levels) == "L2"  # exactly the size still fits
    assert home(93 << 20, levels) == "DRAM"
    assert home(20 << 20, levels) == "L3"
    assert cache_levels(str(tmp_path / "absent")) == []
    assert home(1, []) == "DRAM"


def test_this_machines_levels_are_its_own_sysfs_files():
    import glob

    sizes = []
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        with open(f"{d}/type") as f:
            if f.read().strip() != "Instruction":
                with open(f"{d}/size") as g:
                    sizes.append(int(g.read().strip().rstrip("K")) * 1024)
    assert sorted(size for _, size in cache_levels()) == sorted(sizes)


def test_a_ratio_above_the_ceiling_carries_a_warning():
    assert ratio_cell(0.87) == "0.87"
    assert ratio_cell(1.0) == "1.00"
    assert "⚠" in ratio_cell(1.29) and "wrong for this working set" in ratio_cell(1.29)


@pytest.mark.serial
def test_the_read_rate_is_the_bytes_asked_for_over_the_time_of_their_sum():
    """The rate in bytes per second of a read of n bytes, against the test's own timing of a sum of
    the same n bytes (the best of several, as ReadRate's; within 3x for a loaded machine)."""
    n = 16 << 20
    read = ReadRate(64 << 20)
    part = read.array[: n // 8]
    best = min(_timed(part.sum) for _ in range(5))
    assert n / best / 3 < read(n) < 3 * n / best


def _timed(fn) -> float:
    import time

    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
