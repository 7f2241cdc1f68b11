"""An MoE's experts under tokentop's int8/int4: transformers 5 keeps Qwen3-MoE's and Mixtral's
experts as two 3-D parameters (gate_up_proj [experts, 2 × inner, hidden], down_proj [experts,
hidden, inner]), no nn.Linear that quant.py would replace, and they are most of such a model's
bytes. Each expert's two matrices become quantized linear layers of quant.py (its kernels, its
pools), run by the same routing as transformers' own experts module."""

from __future__ import annotations

import torch


def replaceable(module: torch.nn.Module) -> bool:
    """An experts module of the kind above (no biases, the activation as `act_fn`)."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return (
        isinstance(gate_up, torch.nn.Parameter)
        and isinstance(down, torch.nn.Parameter)
        and gate_up.dim() == down.dim() == 3
        and hasattr(module, "act_fn")
        and not any(name.endswith("_bias") for name, _ in module.named_parameters(recurse=False))
    )


def _linear(weight: torch.Tensor) -> torch.nn.Linear:
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    linear.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)
    return linear


class QuantExperts(torch.nn.Module):
    def __init__(self, experts: torch.nn.Module, make):
        super().__init__()
        self.num_experts = experts.gate_up_proj.shape[0]
        self.act_fn = experts.act_fn
        self.gate_up = torch.nn.ModuleList(make(_linear(w)) for w in experts.gate_up_proj)
        self.down = torch.nn.ModuleList(make(_linear(w)) for w in experts.down_proj)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        # transformers' experts forward (Qwen3MoeExperts, 5.24), each expert's matrices ours
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for (e,) in hit.tolist():
            if e == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(mask[e])
            gate, up = self.gate_up[e](hidden_states[token_idx]).chunk(2, dim=-1)
            y = self.down[e](self.act_fn(gate) * up) * top_k_weights[token_idx, top_k_pos, None]
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out


def replace_experts(model: torch.nn.Module, make) -> torch.nn.Module:
    """Every replaceable experts module of `model` (in place) becomes QuantExperts of `make`'s layers."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if replaceable(child):
                setattr(module, name, QuantExperts(child, make))
    return model
