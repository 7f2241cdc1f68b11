"""A decode step of a Llama-architecture model that calls its modules directly.

On a model whose compute is small, most of a `model(...)` call is transformers' wrapping: config
lookups through decorators, output capturing, a causal mask built for one query token that may
attend everywhere anyway, and two output dataclasses per step. A decode step (one new token per
sequence, a DynamicCache, no padding: our batches repeat one prompt) needs none of it: the same
modules are called in the same order with the same arguments, so the logits are the same (the
tests check greedy outputs token for token against `model.generate`).

Measured on the tiny Llama of benchmarks/framework_overhead.py: this step takes about two thirds
of a bare `model(...)` loop's time per token, and compiled (static cache, C++ wrapper) 0.1 ms
where a compiled `model(...)` takes 0.17.
"""

from __future__ import annotations

import torch

ARCHITECTURES = ("llama",)  # the module layout and decoder-layer signature this step relies on


class LeanDecode:
    def __init__(self, model):
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.layers = list(inner.layers[: model.config.num_hidden_layers])
        self.norm = inner.norm
        self.head = model.lm_head

    @staticmethod
    def supports(model) -> bool:
        inner = getattr(model, "model", None)
        return (getattr(model.config, "model_type", None) in ARCHITECTURES and inner is not None
                and all(hasattr(inner, a) for a in ("embed_tokens", "rotary_emb", "layers", "norm"))
                and hasattr(model, "lm_head"))

    def __call__(self, ids: torch.Tensor, cache, position_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [batch, 1, vocab] for one new token per row; the cache grows by one position.
        Without a mask a dynamic cache is right: the one query attends to every cached position."""
        hidden = self.embed(ids)
        pos_emb = self.rotary(hidden, position_ids=position_ids)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=pos_emb, position_ids=position_ids,
                           past_key_values=cache, use_cache=True)
        return self.head(self.norm(hidden))

    def static_step(self, ids: torch.Tensor, cache, position_ids: torch.Tensor) -> torch.Tensor:
        """The same step over a StaticCache, for torch.compile: the slots past the current position
        are empty (zeros) and must be masked out; an additive mask serves eager and SDPA alike."""
        slots = torch.arange(cache.layers[0].max_cache_len, device=ids.device)
        allowed = slots <= position_ids[0, 0]  # every row sits at the same position: batches repeat one prompt
        dtype = self.embed.weight.dtype  # the hidden states' dtype: the embedding is never quantized
        mask = torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype).view(1, 1, 1, -1)
        return self(ids, cache, position_ids, mask)
