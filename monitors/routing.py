"""An MoE's routing load, from the counts a source gives (the engine's, tui_app/engine/routing.py):
for each MoE layer in order, each routed expert's count of the positions sent to it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from monitors.events import ExpertLoad

RECENT_LOADS = 64  # the loads kept for the window of recent steps: 16 s at the engine's pace


def imbalance(layer: list[int]) -> float | None:
    """A layer's max ÷ mean load (1.0: perfectly even); None before any position."""
    total = sum(layer)
    return max(layer) * len(layer) / total if total else None


def idle_share(layer: list[int]) -> float:
    """The share of a layer's experts never chosen."""
    return sum(1 for c in layer if c == 0) / len(layer) if layer else 0.0


def run_load(counts: list[list[int]]) -> tuple[float, int, float, float] | None:
    """A run's load: the mean of its layers' max ÷ mean, the worst layer and its figure, the share
    of experts never chosen; None before any position."""
    known = [(i, v) for i, layer in enumerate(counts) if (v := imbalance(layer)) is not None]
    if not known:
        return None
    worst, top = max(known, key=lambda iv: iv[1])
    return sum(v for _, v in known) / len(known), worst, top, sum(idle_share(layer) for layer in counts) / len(counts)


def load_text(counts: list[list[int]]) -> str:
    """One line of a run's load (run_load's figures)."""
    load = run_load(counts)
    if load is None:
        return "experts: no position routed"
    mean, worst, top, idle = load
    return f"experts max/mean {mean:.2f} (layer {worst} {top:.2f}), {idle:.0%} never chosen"


def step_weight_bytes(weight_bytes: int, expert_bytes: int, routing: dict | None, experts_hit: int | None) -> int:
    """The weights a step read: `weight_bytes` counts top_k routed experts a layer (one token's
    read, Bandwidth's), so that share is replaced by the distinct experts the step touched."""
    if not routing or not expert_bytes or experts_hit is None:
        return weight_bytes
    return weight_bytes + (experts_hit - routing["layers"] * routing["top_k"]) * expert_bytes


def _add(into: list[list[int]], counts: list[list[int]]) -> list[list[int]]:
    if not into:
        return [list(layer) for layer in counts]
    for mine, theirs in zip(into, counts, strict=True):
        for e, c in enumerate(theirs):
            mine[e] += c
    return into


@dataclass
class LoadBook:
    """A session's routing: the current (or last) run's counts, and its recent loads for a window
    of the last steps, bounded."""

    run_id: int = 0
    run: list[list[int]] = field(default_factory=list)
    run_steps: int = 0
    last_hits: int | None = None
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_LOADS))

    def add(self, ev: ExpertLoad) -> None:
        if ev.run_id != self.run_id:
            self.run_id, self.run, self.run_steps = ev.run_id, [], 0
            self.recent.clear()
        self.run = _add(self.run, ev.counts)
        self.run_steps += ev.steps
        self.last_hits = ev.last_hits
        self.recent.append(ev)

    def window(self, steps: int) -> tuple[list[list[int]], int]:
        """The counts of the last loads that cover at least `steps` steps (all there are, if fewer), and their steps."""
        out: list[list[int]] = []
        covered = 0
        for ev in reversed(self.recent):
            out = _add(out, ev.counts)
            covered += ev.steps
            if covered >= steps:
                break
        return out, covered
