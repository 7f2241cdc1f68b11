"""Lever preparation and refusal: quantized variants, the self-draft model, and what a device cannot do.

Quantization choices, measured on the 2-core CPU with the default model (see docs/performance.md):
- int8: our own weight-only int8 (engine/quant.py), LM head included, decode on our C++ kernel:
  69 tok/s eager, 92 compiled, where torchao's Int8WeightOnly (LM head fp) did 27 compiled and
  fp32 18. The kernel rounds each token's activations to int16 (relative error < 1e-4, perplexity
  unchanged); torch's quantize_dynamic rounds them to int8: 45 tok/s but a broken output
  (perplexity 43 vs 13, looping text).
- int4: on CPU our own too (groups of 32 with an fp16 scale and min, the GGUF's Q4_1 layout; int8
  LM head): 53 tok/s eager, 88 compiled, perplexity 24.56 vs 24.60, where torchao's
  IntxWeightOnly did 8 tok/s at perplexity 29.5. torchao remains the int4 of rows that do not
  split into groups of 32, and on CUDA its Int4WeightOnly (tinygemm) in bf16, the usual fast choice.
- The kernels have a body for each kind of CPU (kernels/isa.h: AVX-512 VNNI, AVX2, generic C++
  for ARM and the rest), so both levers keep their point on every CPU; quant_impl names the one
  this machine builds.
"""

from __future__ import annotations

import copy

import torch

from . import devices, experts, native
from .quant import GROUP, Int4Linear, int4_weights, int8_weights


class LeverError(Exception):
    """A lever the device or the current setting cannot do; the message is the reason shown to the user."""


def quant_impl(device: str, dtype: torch.dtype) -> dict[str, str]:
    if device.startswith("cuda"):
        int4 = "torchao Int4WeightOnly g128 (tinygemm)" if dtype == torch.bfloat16 else "refused: needs --dtype bf16"
        return {"int8": "torchao Int8WeightOnly, LM head fp", "int4": int4}
    if why := devices.refusal(device, "quant", "int4", torch):  # xpu, mps: our kernels are the CPU's
        return {"int8": "torchao Int8WeightOnly, LM head fp", "int4": f"refused: {why}"}
    body = native.isa()
    return {
        "int8": f"int8 per-channel weights, LM head too; decode on our C++ kernel ({body})",
        "int4": f"int4 g32 weights, int8 LM head; decode on our C++ kernel ({body})",
    }


def quant_note(level: str, device: str, variant: torch.nn.Module) -> str:
    """What a finished quantization says: the level, or, on CPU, what runs instead of our kernel."""
    if device.startswith("cuda") or level not in ("int8", "int4"):
        return level
    if level == "int8":
        why = native.load("int8_linear")
        return f"int8 without its C++ kernel, every weight widened (slower): {why}" if why else level
    if any(isinstance(m, Int4Linear) for m in variant.modules()):
        return level
    why = native.load("int4_linear") or f"rows that do not split into groups of {GROUP}"
    return f"int4 on torchao's IntxWeightOnly g32, LM head fp (slower; our kernel: {why})"


def _own_int4(model: torch.nn.Module) -> bool:
    """Our int4 needs its kernel and rows that split into whole groups (an expert's too); else torchao's."""
    widths = [m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
    widths += [p.shape[-1] for m in model.modules() if experts.replaceable(m) for p in (m.gate_up_proj, m.down_proj)]
    return native.load("int4_linear") is None and all(w % GROUP == 0 for w in widths)


def _own(model: torch.nn.Module, level: str, device: str) -> bool:
    """Whether tokentop's own int8/int4 (quant.py) does this level here, rather than torchao."""
    return not device.startswith("cuda") and (level == "int8" or _own_int4(model))


def _not_lm_head(module: torch.nn.Module, fqn: str) -> bool:
    # The LM head is usually tied to the embedding; quantizing it made decode 2x slower here.
    return isinstance(module, torch.nn.Linear) and not fqn.endswith(("lm_head", "embed_out"))


def quant_refusal(model: torch.nn.Module, level: str, device: str) -> str:
    """Why int8/int4 cannot do on this model what they say, or ''. GPT-2's Conv1D layers would stay
    in full precision; so would an MoE's experts kept as 3-D parameters (Qwen3-MoE, Mixtral), most
    of its bytes, where torchao quantizes (nn.Linear layers only) or the experts are of a kind
    experts.py does not know; tokentop's own int8/int4 quantize them."""
    if not any(_not_lm_head(m, n) for n, m in model.named_modules()):
        return f"{level}: this model has no nn.Linear layers to quantize (GPT-2 style Conv1D)"
    handled = {id(p) for m in model.modules() if experts.replaceable(m) for p in m.parameters()} if _own(model, level, device) else set()
    left = sum(p.numel() * p.element_size() for p in model.parameters() if p.dim() >= 3 and id(p) not in handled)
    linear = sum(m.weight.numel() * m.weight.element_size() for n, m in model.named_modules() if _not_lm_head(m, n))
    if left > linear:
        share = left / (left + linear)
        return (
            f"{level}: {share:.0%} of this model's layer weights are its experts' 3-D parameters, which "
            f"{'tokentop' if _own(model, level, device) else 'torchao'}'s {level} would leave in full precision"
        )
    return ""


def quantize(model: torch.nn.Module, level: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """A quantized copy of `model`; the original keeps serving the 'off' level."""
    impl = quant_impl(device, dtype)[level]
    if impl.startswith("refused"):
        raise LeverError(f"{level} on {device}: {impl.removeprefix('refused: ')}")
    if why := quant_refusal(model, level, device):
        raise LeverError(why)
    if _own(model, level, device):
        # The copy shares every fp tensor with the original (embedding, norms): only the linear
        # layers are replaced, so the variant costs its packed bytes, not a second fp model.
        shared = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
        own = int8_weights if level == "int8" else int4_weights
        return own(copy.deepcopy(model, memo=shared)).eval()
    try:
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup
    except ImportError as exc:
        raise LeverError(f"quantization needs torchao ({exc})") from None
    if level == "int8":
        config = Int8WeightOnlyConfig()
    elif device.startswith("cuda"):
        try:
            from torchao.quantization.quantize_.workflows import Int4PackingFormat
        except ImportError as exc:
            raise LeverError(f"int4 on CUDA needs a torchao with tinygemm's packing format ({exc})") from None
        # tinygemm's layout; the default (plain) needs the mslk package for its kernels (torchao ≥ 0.15).
        config = Int4WeightOnlyConfig(group_size=128, int4_packing_format=Int4PackingFormat.TILE_PACKED_TO_4D)
    else:
        config = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))
    qmodel = copy.deepcopy(model)
    try:
        quantize_(qmodel, config, filter_fn=_not_lm_head)
    except Exception as exc:  # noqa: BLE001 - torchao raises many types for unsupported shapes/devices
        raise LeverError(f"{level} on {device}: torchao refused ({type(exc).__name__}: {str(exc)[:160]})") from None
    return qmodel.eval()


def decoder_layers(model: torch.nn.Module) -> tuple[torch.nn.Module, str, torch.nn.ModuleList]:
    """The module holding the stack of decoder blocks, its attribute name and the stack itself."""
    best = None
    for module in model.modules():
        for attr, child in module.named_children():
            if isinstance(child, torch.nn.ModuleList) and len(child) > 0 and (best is None or len(child) > len(best[2])):
                best = (module, attr, child)
    if best is None:
        raise LeverError("cannot find this model's decoder layers to build a draft from")
    return best


def self_draft_label(draft: torch.nn.Module, asked: int, total: int) -> str:
    """What the self-draft really uses: a draft needs fewer layers than the target, so a request for
    as many or more is capped, and the label says so rather than "first 4 of 3 layers"."""
    used = len(decoder_layers(draft)[2])
    capped = f" (--draft-layers {asked} capped: a draft needs fewer layers than the model)" if used != asked else ""
    return f"self-draft: first {used} of {total} layer{'s' if total != 1 else ''}{capped}"


def self_draft(model: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """A draft made of the target's own first n layers, sharing their weights (no extra memory).

    Shallow copies of the modules on the path to the layer stack, so the target is untouched.
    """
    holder, attr, layers = decoder_layers(model)
    n = max(1, min(n_layers, len(layers) - 1))
    memo: dict[int, torch.nn.Module] = {}

    def clone_path(mod: torch.nn.Module) -> torch.nn.Module:
        new = copy.copy(mod)
        new._modules = dict(mod._modules)
        memo[id(mod)] = new
        return new

    draft = clone_path(model)
    # Walk down to the holder, cloning each module on the way.
    path = next(name for name, m in model.named_modules() if m is holder)
    cur_new, cur_old = draft, model
    for part in [p for p in path.split(".") if p]:
        child = clone_path(cur_old._modules[part])
        cur_new._modules[part] = child
        cur_new, cur_old = child, cur_old._modules[part]
    cur_new._modules[attr] = torch.nn.ModuleList(list(layers)[:n])
    config = copy.deepcopy(model.config)
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if hasattr(config, key):
            setattr(config, key, n)
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:n]
    for m in memo.values():
        if hasattr(m, "config"):
            m.config = config
    return draft
