"""An MoE's routing load, from the counts a source gives (the engine's, tui_app/engine/routing.py):
for each MoE layer in order, each routed expert's count of the positions sent to it."""

from __future__ import annotations


def imbalance(layer: list[int]) -> float | None:
    """A layer's max ÷ mean load (1.0: perfectly even); None before any position."""
    total = sum(layer)
    return max(layer) * len(layer) / total if total else None


def idle_share(layer: list[int]) -> float:
    """The share of a layer's experts never chosen."""
    return sum(1 for c in layer if c == 0) / len(layer) if layer else 0.0


def load_text(counts: list[list[int]]) -> str:
    """One line of a run's load: the mean of the layers' max ÷ mean, the worst layer, the experts never chosen."""
    each = [(i, imbalance(layer)) for i, layer in enumerate(counts)]
    known = [(i, v) for i, v in each if v is not None]
    if not known:
        return "experts: no position routed"
    worst, top = max(known, key=lambda iv: iv[1])
    mean = sum(v for _, v in known) / len(known)
    idle = sum(idle_share(layer) for layer in counts) / len(counts)
    return f"experts max/mean {mean:.2f} (layer {worst} {top:.2f}), {idle:.0%} never chosen"


def step_weight_bytes(weight_bytes: int, expert_bytes: int, routing: dict | None, experts_hit: int | None) -> int:
    """The weights a step read: `weight_bytes` counts top_k routed experts a layer (one token's
    read, Bandwidth's), so that share is replaced by the distinct experts the step touched."""
    if not routing or not expert_bytes or experts_hit is None:
        return weight_bytes
    return weight_bytes + (experts_hit - routing["layers"] * routing["top_k"]) * expert_bytes
