"""A decode step of a Llama-architecture model that calls its modules directly.

On a model whose compute is small, most of a `model(...)` call is transformers' wrapping: config
lookups through decorators, output capturing, a causal mask built for one query token that may
attend everywhere anyway, and two output dataclasses per step. A decode step (one new token per
sequence, a DynamicCache, no padding: our batches repeat one prompt) needs none of it: the same
modules are called in the same order with the same arguments, so the logits are the same (the
tests check greedy outputs token for token against `model.generate`).

Measured on the tiny Llama of benchmarks/framework_overhead.py: this step takes about two thirds
of a bare `model(...)` loop's time per token.
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

    def __call__(self, ids: torch.Tensor, cache, position_ids: torch.Tensor) -> torch.Tensor:
        """Logits [batch, 1, vocab] for one new token per row; the cache grows by one position."""
        hidden = self.embed(ids)
        pos_emb = self.rotary(hidden, position_ids=position_ids)
        for layer in self.layers:
            # No mask: a single query attends to every cached position, which is what the mask says.
            hidden = layer(hidden, attention_mask=None, position_embeddings=pos_emb, position_ids=position_ids,
                           past_key_values=cache, use_cache=True)
        return self.head(self.norm(hidden))
