"""KV-cache accounting: the size formula, and bytes measured from a real cache object.

Size = 2 (K and V) × bytes/elem × batch × seq_len × layers × kv_heads × head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass


def kv_formula_bytes(bytes_per_elem: int, batch: int, seq_len: int, layers: int, kv_heads: int, head_dim: int) -> int:
    return 2 * bytes_per_elem * batch * seq_len * layers * kv_heads * head_dim


def model_shape(model) -> tuple[int, int, int, int]:
    """(layers, KV heads, head dim, context length) from a model's text config, under either family's
    names (Llama's and GPT-2's): the formula's inputs, for the engine and for a watched script alike."""
    c = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_layers = int(getattr(c, "num_hidden_layers", None) or c.n_layer)
    n_heads = int(getattr(c, "num_attention_heads", None) or c.n_head)
    kv_heads = int(getattr(c, "num_key_value_heads", None) or n_heads)
    hidden = int(getattr(c, "hidden_size", None) or c.n_embd)
    head_dim = int(getattr(c, "head_dim", None) or hidden // n_heads)
    context_len = int(getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", None) or 2048)
    return n_layers, kv_heads, head_dim, context_len


@dataclass
class KVMeasure:
    used_bytes: int
    alloc_bytes: int
    seq_len: int


def measure_cache(cache, seq_len: int | None = None) -> KVMeasure:
    """Bytes held by a transformers Cache, read from its tensors (not from the formula).

    A dynamic cache holds exactly what it uses. A static cache preallocates `max_cache_len`
    slots per layer; what it uses is the filled fraction of each layer's buffers. `seq_len`, when the
    caller knows it, saves asking the cache: a static cache keeps its length in a device tensor,
    so asking costs a device→host sync per step on a GPU.
    """
    if cache is None:
        return KVMeasure(0, 0, 0)
    tensors = []  # (bytes, tokens it has room for or holds)
    for layer in getattr(cache, "layers", ()):
        keys = getattr(layer, "keys", None)
        values = getattr(layer, "values", None)
        if keys is None or values is None or not hasattr(keys, "nbytes"):
            continue
        tensors += [(keys.nbytes, keys.shape[-2]), (values.nbytes, values.shape[-2])]
    if seq_len is None:
        seq_len = int(cache.get_seq_length())
    if not any(length for _, length in tensors):
        return KVMeasure(0, 0, seq_len)
    # Tensor by tensor: a dynamic cache read while a forward appends to it holds a token more in the
    # layers it has passed than in the rest, and in the layer it is in, a token more in its keys than
    # in its values (cat one, then the other); a sliding-window layer holds its window at most.
    used = sum(n if seq_len >= length else n * seq_len // length for n, length in tensors)
    return KVMeasure(used, sum(n for n, _ in tensors), seq_len)
