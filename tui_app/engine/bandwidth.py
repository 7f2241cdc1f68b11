"""What a decode step reads of the weights, and how fast this machine reads those same bytes.

Decode reads every weight once per token, so its speed is the speed of memory: the live figure
(Session.read_rate) is bytes a step reads ÷ the step's interval, against the rate measured here.
The reference is a read of the weights themselves, in place: the same bytes, on the same pages
(huge or not, pages.py), in whichever cache level holds them, with the engine's threads; a
separate array of the same size would be on other pages and, held beside the weights, double the
engine's memory for as long as it lived. Each run of weights lying one after another (a pool
of packed weights, the fp model moved onto huge pages, or one tensor) of at least MIN_SPAN bytes
is summed as int64 (integer adds: no denormal slow path whatever the bytes are); smaller ones
(norms, biases) are a fraction of a percent of the bytes but a Python call each, which would make
the read look slower than memory is. On the default model the read in place and one of a separate
array of the same size agree within a few percent (docs/performance.md, memory bandwidth).
"""

from __future__ import annotations

import time

import torch

from monitors.routing_hooks import ONE, ROUTED
from tui_app.engine import devices
from tui_app.engine.experts import QuantExperts
from tui_app.engine.routing import experts_modules

MIN_SPAN = 1 << 20
ALIGN = 64  # pages.adopt starts each weight on a multiple of this
REPEATS = 5


def tensor_bytes(t) -> int:
    """Storage bytes of a tensor, looking inside tensor subclasses (torchao's quantized weights)."""
    return sum(p.numel() * p.element_size() for p in _plain(t))


def _plain(t):
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        for name in names:
            yield from _plain(getattr(t, name))
    else:
        yield t


def _read_tensors(model) -> list:
    """The tensors a decode step reads: each once, but the embedding table only when the LM head
    is tied to it (then the head reads all of it); otherwise one row of it per token."""
    buffers = [b for name, b in model.named_buffers() if not name.endswith((ROUTED, ONE))]  # routing.py's counts are no weights
    seen = {id(t): t for t in list(model.parameters()) + buffers}
    table = model.get_input_embeddings().weight
    if getattr(model.get_output_embeddings(), "weight", None) is not table:
        seen.pop(id(table))
    return list(seen.values())


def _experts(model) -> tuple[int, int] | None:
    """(experts, experts a token) of an MoE, by its config; None for a dense model."""
    cfg = getattr(model, "config", None)
    n = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    k = getattr(cfg, "num_experts_per_tok", None)
    return (n, k) if n and k and k < n else None


def experts_text(model) -> str:
    moe = _experts(model)
    return f"{moe[0]} experts, {moe[1]} a token" if moe else ""


def weight_bytes(model) -> int:
    """Weight bytes a decode step reads (see _read_tensors). An MoE's routed experts (one slice an
    expert of each of their parameters) are read only for the experts the router picks: the top k
    of n for one token, so k/n of their bytes. A batch or a verify step reads more of them: the
    experts its positions touched, which the engine counts (routing.py, expert_bytes below)."""
    moe = _experts(model)
    active = moe[1] / moe[0] if moe else 1.0
    modules = experts_modules(model) if moe else []
    routed = {id(p) for m in modules if not isinstance(m, QuantExperts) for p in m.parameters()}
    total = sum(round(tensor_bytes(t) * (active if id(t) in routed else 1.0)) for t in _read_tensors(model))
    # Quantized experts lie in the pools beside the other layers: their idle share is taken off by layer.
    quantized = sum(layer.nbytes() for m in modules if isinstance(m, QuantExperts) for layer in (*m.gate_up, *m.down))
    return total - round(quantized * (1 - active))


def expert_bytes(model) -> int:
    """The bytes of one routed expert of one layer, as this variant holds them; 0 for a dense model."""
    modules = experts_modules(model)
    if not modules or _experts(model) is None:
        return 0
    m = modules[0]
    if isinstance(m, QuantExperts):
        return sum(layer.nbytes() for layer in (m.gate_up[0], m.down[0]))
    return sum(tensor_bytes(p) // m.num_experts for p in m.parameters(recurse=False))


def spans(model, min_bytes: int = MIN_SPAN) -> list[torch.Tensor]:
    """int64 views of the memory the read tensors lie in: each run of tensors that lie one after
    another in one storage (a pool of packed weights, the fp weights moved onto huge pages) is one
    view, if it has at least `min_bytes`. Other tensors in the same storage (the fp model's, beside
    a quantized variant's norms) are not read."""
    by_storage: dict[int, list[torch.Tensor]] = {}
    for t in _read_tensors(model):
        for p in _plain(t):
            if p.numel():
                by_storage.setdefault(p.untyped_storage().data_ptr(), []).append(p)
    out = []
    for parts in by_storage.values():
        storage = parts[0].untyped_storage()
        base = storage.data_ptr()
        whole = torch.empty(0, dtype=torch.uint8, device=parts[0].device).set_(storage)
        runs: list[list[int]] = []
        for lo, hi in sorted((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size()) for p in parts):
            if runs and lo <= runs[-1][1] + ALIGN:  # next to the run (or in its alignment padding)
                runs[-1][1] = max(runs[-1][1], hi)
            else:
                runs.append([lo, hi])
        for lo, hi in runs:
            start = lo - base + (base - lo) % 8  # an int64 view starts on a multiple of 8
            n = (hi - base - start) // 8 * 8
            if n >= min_bytes:
                out.append(whole[start : start + n].view(torch.int64))
    return out


def read_rate(model, repeats: int = REPEATS) -> tuple[int, float]:
    """(bytes read, the best rate in bytes/s of `repeats` reads of them), after one read that
    leaves them wherever they fit, as the previous decode step does."""
    views = spans(model)
    nbytes = sum(v.numel() * 8 for v in views)
    if not nbytes:
        return 0, 0.0
    device = str(views[0].device)
    accel = views[0].device.type != "cpu"  # any accelerator: its launches are asynchronous, so synced
    # On a GPU a sum a tensor is launch-bound: 1013 GB/s on an H200 whose copy moves 4204 (read +
    # written). torch's multi-tensor norm reads many tensors a launch, as the optimizers' foreach
    # paths do; the bits read as floats, whatever they hold (gpu_check's bandwidth check judges it).
    floats = [v.view(torch.float32) for v in views] if accel else []

    def once() -> float:
        t = time.perf_counter()
        if accel:
            torch._foreach_norm(floats)
            devices.synchronize(device, torch)
        else:
            for v in views:
                v.sum()
        return time.perf_counter() - t

    with torch.inference_mode():
        once()
        best = min(once() for _ in range(repeats))
    return nbytes, nbytes / best
