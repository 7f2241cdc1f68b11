"""A decode step of a Llama-architecture model that calls its modules directly.

On a model whose compute is small, most of a `model(...)` call is transformers' wrapping: config
lookups through decorators, output capturing, a causal mask built for one query token that may
attend everywhere anyway, and two output dataclasses per step. A decode step (one new token per
sequence, a DynamicCache, no padding: our batches repeat one prompt) needs none of it: the same
modules are called in the same order with the same arguments, so the logits are the same (the
tests check greedy outputs token for token against `model.generate`). In a quantized variant a
decoder layer's q/k/v and gate/up projections are each called as one joined layer (the same
numbers: their rows are independent), in a copy of the decoder layer's own few lines.

Measured on the tiny Llama of benchmarks/engine/framework_overhead.py: this step takes about two thirds
of a bare `model(...)` loop's time per token, and compiled (static cache, C++ wrapper) 0.1 ms
where a compiled `model(...)` takes 0.17.
"""

from __future__ import annotations

from functools import partial

import torch

from . import native
from .models import cache_kwarg
from .quant import Int8Linear, joined

ARCHITECTURES = ("llama",)  # the module layout and decoder-layer signature this step relies on
ATTENTION = "tokentop"  # our attention function's name in transformers' registries


def _attention(sdpa, module, query, key, value, attention_mask, scaling=None, decode_position=None, **kwargs):
    """transformers' SDPA (`sdpa`), except in a decode step over a static cache on CPU (`decode_position`
    given, by static_step): there SDPA would read every slot of the cache, filled or not, and
    kernels/decode_attention.cpp reads only the filled ones (same numbers to float rounding)."""
    if decode_position is None or query.device.type != "cpu" or query.dtype != torch.float32 or query.shape[2] != 1:
        return sdpa(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return torch.ops.tokentop.decode_attention(query, key, value, decode_position, scale), None


def use_own_attention(model) -> bool:
    """Route `model`'s attention through _attention, where the kernel builds (once per machine: call
    this in a phase of its own, not mid-run) and the model is on CPU."""
    current = model.config._attn_implementation
    if current == ATTENTION:
        return True
    if model.device.type != "cpu" or current != "sdpa" or native.load("decode_attention") is not None:
        return False
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    # SDPA bound here once: every layer of every eager step (prefill included) passes through.
    AttentionInterface.register(ATTENTION, partial(_attention, sdpa_attention_forward))
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the masks SDPA gets, as it still runs the prefill
    model.set_attn_implementation(ATTENTION)
    return True


class LeanDecode:
    def __init__(self, model):
        from transformers.models.llama import modeling_llama

        self.llama = modeling_llama  # what _joined_layer calls of transformers' own Llama code
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.layers = list(inner.layers[: model.config.num_hidden_layers])
        self.cache_kw = cache_kwarg(type(self.layers[0]))
        self.norm = inner.norm
        self.head = model.lm_head
        self.own_attention = False  # static_step's attention: set by the engine when it compiles the step
        self.fused: tuple | None = None  # static_step as one op's arguments (use_fused_step)
        # A quantized variant's q/k/v and gate/up projections, each group as one layer (quant.joined).
        self.joints = [self._joints(layer) for layer in self.layers]

    @staticmethod
    def _joints(layer):
        attn, mlp = layer.self_attn, layer.mlp
        qkv, gate_up = joined([attn.q_proj, attn.k_proj, attn.v_proj]), joined([mlp.gate_proj, mlp.up_proj])
        return None if qkv is None or gate_up is None else (qkv, gate_up)

    def named_joints(self):
        """The joined projections, named as the modules they stand in for (the step's anatomy)."""
        for i, joints in enumerate(self.joints):
            if joints is not None:
                yield f"model.layers.{i}.self_attn.qkv", joints[0]
                yield f"model.layers.{i}.mlp.gate_up", joints[1]

    @staticmethod
    def supports(model) -> bool:
        inner = getattr(model, "model", None)
        return (
            getattr(model.config, "model_type", None) in ARCHITECTURES
            and inner is not None
            and all(hasattr(inner, a) for a in ("embed_tokens", "rotary_emb", "layers", "norm"))
            and hasattr(model, "lm_head")
        )

    def __call__(self, ids: torch.Tensor, cache, position_ids: torch.Tensor, mask: torch.Tensor | None = None, **extra) -> torch.Tensor:
        """Logits [batch, 1, vocab] for one new token per row; the cache grows by one position.
        Without a mask a dynamic cache is right: the one query attends to every cached position."""
        hidden = self.embed(ids)
        pos_emb = self.rotary(hidden, position_ids=position_ids)
        for layer, joints in zip(self.layers, self.joints, strict=True):
            if joints is None:
                hidden = layer(
                    hidden, attention_mask=mask, position_embeddings=pos_emb, position_ids=position_ids, use_cache=True, **{self.cache_kw: cache}, **extra
                )
            else:
                hidden = self._joined_layer(layer, joints, hidden, pos_emb, cache, mask, extra)
        return self.head(self.norm(hidden))

    def _joined_layer(self, layer, joints, hidden, pos_emb, cache, mask, extra) -> torch.Tensor:
        """transformers' LlamaDecoderLayer (attention, then MLP, each on the normed input and added
        to the residual) with q/k/v as one call and gate/up as one."""
        qkv, gate_up = joints
        attn, mlp = layer.self_attn, layer.mlp
        x = layer.input_layernorm(hidden)
        heads = (*x.shape[:-1], -1, attn.head_dim)
        sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        q, k, v = (t.view(heads).transpose(1, 2) for t in qkv(x).split(sizes, dim=-1))
        q, k = self.llama.apply_rotary_pos_emb(q, k, *pos_emb)
        k, v = cache.update(k, v, attn.layer_idx)
        attention = self.llama.ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, self.llama.eager_attention_forward)
        out, _ = attention(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling, **extra)
        hidden = hidden + attn.o_proj(out.reshape(*x.shape[:-1], -1))
        gate, up = gate_up(layer.post_attention_layernorm(hidden)).split(mlp.gate_proj.out_features, dim=-1)
        return hidden + mlp.down_proj(mlp.act_fn(gate) * up)

    def use_fused_step(self) -> bool:
        """Run static_step as one op (kernels/decode_step.cpp), where every layer's projections are
        joined layers of one quantized kind on our kernels, the head is int8 on its kernel, the MLP is
        SiLU-gated, RoPE's frequencies are fixed, the model is on CPU in fp32, and the op builds (once
        per machine: call this in a phase of its own)."""
        if self.fused is not None:
            return True
        first, head = self.layers[0], self.head
        rope_type = getattr(self.rotary, "rope_type", None)
        if (
            any(j is None for j in self.joints)
            or self.embed.weight.device.type != "cpu"
            or self.embed.weight.dtype != torch.float32
            or first.mlp.config.hidden_act != "silu"
            or rope_type is None
            or "dynamic" in rope_type
            or rope_type == "longrope"
            or not isinstance(head, Int8Linear)
            or not head.kernel
            or head.bias is not None
            or "qweight" not in head.pooled
        ):
            return False
        projections = [
            p for layer, (qkv, gate_up) in zip(self.layers, self.joints, strict=True) for p in (qkv, layer.self_attn.o_proj, gate_up, layer.mlp.down_proj)
        ]
        kind = type(projections[0])
        if any(
            type(p) is not kind
            or not p.kernel
            or p.bias is not None
            or any(n not in p.pooled or getattr(p, n) is not getattr(projections[0], n) for n in kind.packs)
            for p in projections
        ):
            return False
        norms = [n for layer in self.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)] + [self.norm]
        if len({getattr(n, "variance_epsilon", None) for n in norms}) != 1 or norms[0].variance_epsilon is None:
            return False
        if native.load("decode_step") is not None:
            return False

        def layout(p) -> list[int]:  # where p's tiles (and int8's scales) lie in its pools, and its shape
            return [p.pooled[p.packs[0]][0], p.pooled["scale"][0] if isinstance(p, Int8Linear) else -1, p.out_features, p.in_features]

        attn = first.self_attn
        self.fused = (
            self.rotary.inv_freq,
            float(self.rotary.attention_scaling),
            [n.weight for n in norms],
            getattr(projections[0], kind.packs[0]),
            getattr(projections[0], "scale", None) if kind is Int8Linear else None,
            [v for p in projections for v in layout(p)],
            head.qweight,
            head.scale,
            layout(head),
            attn.config.num_attention_heads,
            norms[0].variance_epsilon,
            attn.scaling,
        )
        return True

    def static_step(self, ids: torch.Tensor, cache, position_ids: torch.Tensor) -> torch.Tensor:
        """The same step over a StaticCache, for torch.compile: the slots past the current position
        are empty (zeros) and must be masked out; an additive mask serves eager and SDPA alike."""
        if self.fused is not None:
            inv_freq, rope_scale, norms, weights, scales, layout, head, head_scales, head_layout, heads, eps, scaling = self.fused
            layers = cache.layers[: len(self.layers)]
            return torch.ops.tokentop.decode_step(
                ids,
                position_ids,
                self.embed.weight,
                inv_freq,
                rope_scale,
                norms,
                weights,
                scales,
                layout,
                head,
                head_scales,
                head_layout,
                [c.keys for c in layers],
                [c.values for c in layers],
                [c.cumulative_length for c in layers],
                heads,
                eps,
                scaling,
            )
        slots = torch.arange(cache.layers[0].max_cache_len, device=ids.device)
        allowed = slots <= position_ids  # [B, S]: each row its own filled slots, as the attention op reads them
        dtype = self.embed.weight.dtype  # the hidden states' dtype: the embedding is never quantized
        mask = torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[:, None, None, :]
        # The mask goes along either way: _attention hands SDPA any step its op cannot take.
        extra = {"decode_position": position_ids} if self.own_attention else {}
        return self(ids, cache, position_ids, mask, **extra)
