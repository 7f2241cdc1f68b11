"""An MoE's routing, counted where it happens: each layer's routed-experts module is called with the
router's top-k choices (transformers 5's experts interface, `experts(hidden, top_k_index, weights)`,
which every MoE family it runs shares, and tokentop's QuantExperts with it), so a forward pre-hook
adds them into a count on the module's own device, by `index_add_`: `bincount` would size its output
on the host, a sync. The counts travel with the step's tokens in its one device→host transfer
(decoding.py's read), so no read is added. A count is of positions forwarded: prefill and decode,
every batch row (a padded row's padding included, as the experts compute it), a verify step's
proposals, and a self-draft's forwards through the layers it shares with the model."""

from __future__ import annotations

import time

import numpy as np
import torch

from monitors import routing_hooks as hooks
from monitors.events import ExpertLoad

from .experts import QuantExperts

LOAD_EVERY_S = 0.25  # the expert pane's pace: a long MoE's counts are thousands of numbers


def experts_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each MoE layer's routed experts, in layer order, tokentop's quantized ones among them."""
    return hooks.experts_modules(model, (QuantExperts,))


class Routing:
    """The counts of one MoE model and its variants (quantized copies, a self-draft): `begin` before
    a step's forwards, `packed` for the read, `settle` with what the read brought back."""

    def __init__(self, layers: int, experts: int, top_k: int, shared: int):
        self.layers, self.experts, self.top_k, self.shared = layers, experts, top_k, shared
        self._buffers: dict[int, list[torch.Tensor]] = {}
        self.run = np.zeros((layers, experts), dtype=np.int64)  # the run's counts so far
        self.step_hits = 0  # distinct (layer, expert) pairs the last step's forwards touched
        self.delta, self.delta_steps, self.sent = np.zeros_like(self.run), 0, time.monotonic()  # not yet sent

    @classmethod
    def of(cls, model: torch.nn.Module) -> tuple[Routing | None, str]:
        """The model's routing, or None and why not ("" for a dense model)."""
        _, shape, why = hooks.find(model, (QuantExperts,))
        if shape is None:
            return None, why
        routing = cls(**shape)
        routing.attach(model)
        return routing, ""

    def attach(self, model: torch.nn.Module) -> None:
        """Hooks and counts on `model`'s experts (a variant made since: its new experts modules)."""
        if id(model) in self._buffers:
            return
        modules = experts_modules(model)
        if len(modules) != self.layers:
            return  # a draft of some layers only: its forwards count through the modules it shares
        self._buffers[id(model)] = hooks.hook_counts(modules, self.experts, torch)

    def begin(self, model: torch.nn.Module) -> list[torch.Tensor] | None:
        """Zeroes `model`'s counts before a step (forwards outside steps, such as the perplexity's,
        count into nothing read); returns the tensors the step's read packs."""
        self.attach(model)
        buffers = self._buffers.get(id(model))
        if buffers:
            torch._foreach_zero_(buffers)
        return buffers

    def shape(self) -> dict:
        return {"layers": self.layers, "experts": self.experts, "top_k": self.top_k, "shared": self.shared}

    def new_run(self) -> None:
        self.run = np.zeros((self.layers, self.experts), dtype=np.int64)
        self.delta, self.delta_steps, self.sent = np.zeros_like(self.run), 0, time.monotonic()

    def settle(self, values: list) -> None:
        """The step's counts as its read brought them (layers × (experts + 1), flat)."""
        step = np.asarray(values, dtype=np.int64).reshape(self.layers, self.experts + 1)[:, : self.experts]
        self.run += step
        self.delta += step
        self.delta_steps += 1
        self.step_hits = int(np.count_nonzero(step))

    def load(self, run_id: int, end: bool = False) -> ExpertLoad | None:
        """The counts since the last load sent, if a quarter second has passed (or the run ended)."""
        if not self.delta_steps or not (end or time.monotonic() - self.sent >= LOAD_EVERY_S):
            return None
        ev = ExpertLoad(run_id=run_id, steps=self.delta_steps, counts=self.delta.tolist(), last_hits=self.step_hits)
        self.delta, self.delta_steps, self.sent = np.zeros_like(self.run), 0, time.monotonic()
        return ev

    def counts(self) -> list[list[int]]:
        return self.run.tolist()
