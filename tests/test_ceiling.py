"""benchmarks/ceiling.py's bytes per token, for tokentop and for llama.cpp, against independent counts."""

import torch

from benchmarks.ceiling import gguf_bytes_per_token, weight_bytes
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
