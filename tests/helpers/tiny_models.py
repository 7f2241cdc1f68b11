"""Small models of other architectures, saved where the engine loads them: seeded weights (scaled
so the logits are confident: a wrong step shows as a different greedy token), and the default
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


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def save_thinker(folder):
    """A small Qwen3 of seeded weights with the default model's tokenizer extended by `<think>` and
    `</think>` and a chat template that opens the think span, as DeepSeek-R1's and Qwen3's thinking
    templates do; returns the tokenizer."""
    import transformers as tf

    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf, load_model

    cached = _gguf_cache_dir(find_default_gguf())
    if not (cached / "tokenizer.json").exists():  # the first conversion writes it
        load_model("default", "cpu", torch.float32)
    tok = tf.AutoTokenizer.from_pretrained(str(cached))
    tok.add_tokens(["<think>", "</think>"])
    tok.chat_template = THINKING_TEMPLATE
    torch.manual_seed(0)
    cfg = tf.Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16
    )
    tf.Qwen3ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok
