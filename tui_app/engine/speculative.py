"""Speculative decoding: proposals from prompt n-grams or a draft model, verified greedily by the target.

Verification keeps the longest prefix of proposals that equals the target's own greedy choice,
then adds the target's next token, so the output is exactly plain greedy decoding.
"""

from __future__ import annotations

import torch

from monitors.kvcache import measure_cache
from tui_app.engine.models import cache_kwarg, to_device


def sliding_layers(cache) -> list:
    """A dynamic cache's sliding-window layers (Mistral's, Gemma's local ones): once full they drop
    the states before their window, and then refuse to crop ("does not track past states")."""
    return [layer for layer in getattr(cache, "layers", ()) if hasattr(layer, "activate_past_recording")]


def rollback_ready(cache):
    """A dynamic cache that speculation can crop: its sliding layers keep their past until the next
    crop, which a verify step always makes."""
    for layer in sliding_layers(cache):
        layer.activate_past_recording()
    return cache


def lookup_proposals(context: list[int], max_ngram: int = 3, num_tokens: int = 8) -> list[int]:
    """Prompt-lookup decoding: find the latest earlier occurrence of the context's last n-gram
    (longest n first) and propose the tokens that followed it there."""
    n_ctx = len(context)
    for n in range(min(max_ngram, n_ctx - 1), 0, -1):
        tail = context[n_ctx - n :]
        for start in range(n_ctx - n - 1, -1, -1):
            if context[start : start + n] == tail:
                follow = context[start + n : start + n + num_tokens]
                if follow:
                    return follow
    return []


def accept_greedy(proposals: list[int], target_choice: list[int]) -> int:
    """How many proposals match the target's greedy choices (target_choice[i] follows proposal i-1)."""
    n = 0
    for p, t in zip(proposals, target_choice, strict=False):  # the target has one choice more
        if p != t:
            break
        n += 1
    return n


class DraftProposer:
    """Greedy proposals from a small draft model that keeps its own KV cache in step with the context."""

    def __init__(self, model: torch.nn.Module, device: str, label: str):
        from transformers import DynamicCache

        self.model = model
        self.device = device
        self.label = label
        self._cache_cls = DynamicCache
        self.k = 4
        self.reset()

    def reset(self) -> None:
        self.cache = rollback_ready(self._cache_cls(config=self.model.config))
        self.cached = 0

    @torch.inference_mode()
    def propose(self, context: list[int]) -> torch.Tensor:
        """k greedy proposals, [k] on the model's device: each is fed back without the host reading
        it (on a GPU a read is a sync), and the engine reads them with the target's choices at once."""
        if self.cached >= len(context):  # context shrank (new run): start again
            self.reset()
        feed = context[self.cached :]
        out: list[torch.Tensor] = []
        ids = to_device([feed], self.device)
        for _ in range(self.k):
            pos = self.cached
            position_ids = torch.arange(pos, pos + ids.shape[1], device=self.device).unsqueeze(0)
            kwargs = {cache_kwarg(type(self.model)): self.cache, "position_ids": position_ids}
            logits = self.model(input_ids=ids, **kwargs, use_cache=True, logits_to_keep=1).logits
            self.cached += ids.shape[1]
            ids = logits[:, -1:].argmax(-1)
            out.append(ids[0])
        return torch.cat(out)

    def settle(self, accepted_len: int, n_proposed: int) -> None:
        """Drop the draft's cache entries past the accepted proposals, and adapt how many to propose."""
        # The cache holds the context plus the first k-1 proposals (the last was never fed back).
        excess = (n_proposed - 1) - accepted_len
        if excess > 0:
            self.cache.crop(-excess)
            self.cached -= excess
        self.k = min(8, self.k + 1) if accepted_len == n_proposed else max(1, self.k - 1)

    def kv_bytes(self) -> int:
        return measure_cache(self.cache).used_bytes
