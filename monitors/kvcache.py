"""KV-cache accounting: the size formula, and bytes measured from a real cache object.

Size = 2 (K and V) × bytes/elem × batch × seq_len × layers × kv_heads × head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass


def kv_formula_bytes(bytes_per_elem: int, batch: int, seq_len: int, layers: int, kv_heads: int, head_dim: int) -> int:
    return 2 * bytes_per_elem * batch * seq_len * layers * kv_heads * head_dim


@dataclass
class KVMeasure:
    used_bytes: int
    alloc_bytes: int
    seq_len: int


def measure_cache(cache, seq_len: int | None = None) -> KVMeasure:
    """Bytes held by a transformers Cache, read from its tensors (not from the formula).

    A dynamic cache holds exactly what it uses. A static cache preallocates `max_cache_len`
    slots per layer; what it uses is the filled fraction of those buffers. `seq_len`, when the
    caller knows it, saves asking the cache: a static cache keeps its length in a device tensor,
    so asking costs a device→host sync per step on a GPU.
    """
    if cache is None:
        return KVMeasure(0, 0, 0)
    alloc = 0
    max_len = 0
    for layer in getattr(cache, "layers", ()):
        keys = getattr(layer, "keys", None)
        values = getattr(layer, "values", None)
        if keys is None or values is None or not hasattr(keys, "nbytes"):
            continue
        alloc += keys.nbytes + values.nbytes
        max_len = max(max_len, keys.shape[-2])
    if seq_len is None:
        seq_len = int(cache.get_seq_length())
    if max_len == 0:
        return KVMeasure(0, 0, seq_len)
    used = alloc if seq_len >= max_len else alloc * seq_len // max_len
    return KVMeasure(used, alloc, seq_len)
