"""Small models of other architectures, saved where the engine loads them: seeded weights (scaled
so the logits are confident: a wrong step shows as a different greedy token), and the default
model's tokenizer beside them (tokentop downloads nothing)."""

from __future__ import annotations

import functools
import itertools
import re

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
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% if enable_thinking is defined and not enable_thinking %}</think>{% endif %}{% endif %}"
)


def thinker_tokenizer():
    """The default model's tokenizer extended by `<think>` and `</think>`, with a chat template that
    opens the think span, as DeepSeek-R1's and Qwen3's thinking templates do."""
    import transformers as tf

    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf, load_model

    cached = _gguf_cache_dir(find_default_gguf())
    if not (cached / "tokenizer.json").exists():  # the first conversion writes it
        load_model("default", "cpu", torch.float32)
    tok = tf.AutoTokenizer.from_pretrained(str(cached))
    tok.add_tokens(["<think>", "</think>"])
    tok.chat_template = THINKING_TEMPLATE
    return tok


def save_thinker(folder):
    """A small Qwen3 of seeded weights with thinker_tokenizer(); returns the tokenizer."""
    import transformers as tf

    tok = thinker_tokenizer()
    torch.manual_seed(0)
    cfg = tf.Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16
    )
    tf.Qwen3ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok


@functools.cache  # each call would load the tokenizer again
def distinct_words(n: int) -> str:
    """`n` distinct whole words of thinker_tokenizer()'s, a token each: a scripted think that a budget
    of fewer tokens cuts."""
    words = [t[1:] for t, _ in sorted(thinker_tokenizer().get_vocab().items(), key=lambda kv: kv[1]) if re.fullmatch(r"Ġ[a-z]{5,9}", t)]
    return "".join(" " + w for w in words[:n])


def save_scripted_thinker(folder, thinking: str, answer: str) -> tuple[list[int], int]:
    """A small Qwen3 whose greedy output after any chat prompt of thinker_tokenizer()'s template is
    `thinking`, `</think>`, `answer`, then its end: each layer's output projections are zero, so a
    step's logits are those of its input token alone, and the head maps each token of that script to
    the next. For a server that must shape every answer whatever the client asks (no grammar on the
    request). Returns the script's token ids, the end included, and `</think>`'s. Head sizes of 64,
    which vLLM's CPU attention takes."""
    import transformers as tf

    tok = thinker_tokenizer()
    closer = tok.convert_tokens_to_ids("</think>")
    script = [*tok.encode(thinking), closer, *tok.encode(answer), tok.eos_token_id]
    prompt = tok.apply_chat_template([{"role": "user", "content": "?"}], add_generation_prompt=True, tokenize=False)
    start = tok.encode(prompt)[-1]
    chain = [start, *script]
    assert len(set(chain)) == len(chain), "a token twice in the script: the next one would be ambiguous"
    torch.manual_seed(0)
    cfg = tf.Qwen3Config(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, max_position_embeddings=2048, tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    model = tf.Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()
        head = model.lm_head.weight
        head.zero_()
        emb = model.model.embed_tokens.weight
        for now, after in itertools.pairwise(chain):
            head[after] = 10 * emb[now] / emb[now].norm()  # random directions in 128 dimensions: the others' logits a tenth as large
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return script, closer


E, K = 8, 2
COMMON = {"vocab_size": 49152, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "eos_token_id": 2}


def moe_config(family: str, **sizes):
    """A small random-weight MoE of the family: 8 experts, 2 a token, 3 layers, unless `sizes` say otherwise."""
    import transformers as tf

    base = {**COMMON, "num_experts_per_tok": K, "intermediate_size": 96, "num_hidden_layers": 3}
    if family == "qwen3moe":
        cls, cfg, own = tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig, {"head_dim": 16, "num_experts": E, "moe_intermediate_size": 32, "decoder_sparse_step": 1}
    elif family == "mixtral":
        cls, cfg, own = tf.MixtralForCausalLM, tf.MixtralConfig, {"num_local_experts": E}
    elif family == "olmoe":
        cls, cfg, own = tf.OlmoeForCausalLM, tf.OlmoeConfig, {"num_experts": E}
    elif family == "qwen2moe":  # a shared expert beside the routed ones
        cls, cfg, own = tf.Qwen2MoeForCausalLM, tf.Qwen2MoeConfig, {"num_experts": E, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}
    elif family == "deepseekv3":  # its first layer dense, a shared expert in the others; one group, so its choice is the logits' top k
        cls, cfg = tf.DeepseekV3ForCausalLM, tf.DeepseekV3Config
        own = {
            "n_routed_experts": E, "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
            "q_lora_rank": None, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
        }  # fmt: skip
    else:
        cls, cfg, own = tf.GptOssForCausalLM, tf.GptOssConfig, {"num_local_experts": E, "head_dim": 16}
    kwargs = {**base, **own, **sizes}
    if family == "gptoss":
        kwargs["layer_types"] = ["full_attention"] * kwargs["num_hidden_layers"]
    return cls, cfg(**kwargs)


FAMILIES = ["qwen3moe", "mixtral", "olmoe", "qwen2moe", "deepseekv3", "gptoss"]


def routers(model) -> list[torch.nn.Module]:
    """Each MoE layer's router, found the test's own way (by class name), not routing.py's."""
    return [m for m in model.modules() if type(m).__name__.lower().endswith("topkrouter")]


def save_moe(family: str, folder, **sizes) -> None:
    torch.manual_seed(0)
    cls, cfg = moe_config(family, **sizes)
    model = cls(cfg)
    with torch.no_grad():  # save_tiny's ×20 would saturate the routers' softmax and sigmoid into ties that a recount breaks otherwise
        for router in routers(model):
            router.weight.div_(20)
    save_tiny(model, folder)
