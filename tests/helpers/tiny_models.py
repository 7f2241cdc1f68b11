"""A small model of another architecture, saved where the engine loads it: seeded weights scaled
so its logits are confident (a wrong step shows as a different greedy token), and the default
model's tokenizer beside them (tokentop downloads nothing)."""

from __future__ import annotations

import torch


def save_tiny(model, folder) -> None:
    from transformers import AutoTokenizer

    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf, load_model

    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    model.save_pretrained(folder)
    cached = _gguf_cache_dir(find_default_gguf())
    if not (cached / "tokenizer.json").exists():  # the first conversion writes it
        load_model("default", "cpu", torch.float32)
    AutoTokenizer.from_pretrained(str(cached)).save_pretrained(folder)
