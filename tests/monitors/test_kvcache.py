"""The KV cache's bytes read from its tensors while a forward appends to it, on another thread (a
watched script's hook reads the cache off the generating thread): every state the appending passes
through gives the bytes of the tokens the caller says it holds."""

from __future__ import annotations

import torch
import transformers as tf

from monitors.kvcache import kv_formula_bytes, measure_cache

LAYERS, HEADS, DIM = 3, 2, 8


def test_a_dynamic_cache_read_mid_append_gives_the_tokens_it_held_before():
    cache = tf.DynamicCache()
    for i in range(LAYERS):
        cache.update(torch.zeros(1, HEADS, 3, DIM), torch.zeros(1, HEADS, 3, DIM), i)
    three = kv_formula_bytes(batch=1, seq_len=3, layers=LAYERS, kv_heads=HEADS, head_dim=DIM, bytes_per_elem=4)
    assert measure_cache(cache, 3).used_bytes == three
    one = torch.zeros(1, HEADS, 1, DIM)
    layer = cache.layers[1]
    cache.layers[0].update(one, one)  # layer 0 passed
    layer.keys = torch.cat([layer.keys, one], dim=-2)  # layer 1 halfway: DynamicLayer.update's first line
    assert measure_cache(cache, 3).used_bytes == three  # its keys' extra token is not counted, nor its values' missing one read short
    layer.values = torch.cat([layer.values, one], dim=-2)
    cache.layers[2].update(one, one)
    assert measure_cache(cache, 4).used_bytes == kv_formula_bytes(batch=1, seq_len=4, layers=LAYERS, kv_heads=HEADS, head_dim=DIM, bytes_per_elem=4)
