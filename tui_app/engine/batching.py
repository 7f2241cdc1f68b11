"""Continuous batching, the engine's own: distinct prompts of different lengths arriving during a
run, each admitted into the batched decode at a token boundary when a slot is free, and leaving
when it is done, its slot taken by the next in the queue: what a serving engine does, in one process.

Why not transformers' `generate_batch`: it runs its own loop on a thread of its own, with its own
paged attention, so the engine could neither time a step nor switch a lever between two; and on
this CPU its pace was unsteady, 7.3 s and then 15.1 s for the same 8 × 32 tokens (docs/batching.md).

The sequences share one dynamic KV cache, padded on the left: row i's first `pad[i]` columns are
no token of its own, masked out by the attention mask, and its positions count its own tokens
only. An arrival is prefilled alone (its prompt in one forward, its first token picked) and its
cache joined to the batch's, the shorter padded on the left; a finished sequence's row is taken
out, with the padding every row left then shares. Row 0 is the run's own sequence (its text
streamed, its tokens timed); the others come from data/batch_prompts.txt, one every ARRIVAL_STEPS
steps, with lengths that differ (SHARES), so they leave at different times.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

from tui_app.engine.models import cache_kwarg, to_device
from tui_app.prompts import data_text

ARRIVAL_STEPS = 4
SHARES = (0.25, 0.5, 1.0, 0.75)  # an arrival's max new tokens, a share of the run's
MAX_DONE = 64  # finished sequences kept for a reader (a test's check of their text)


@cache
def batch_prompts() -> tuple[str, ...]:
    """The arrivals' prompts, read once a process (an arrival comes every ARRIVAL_STEPS steps)."""
    return tuple(line for line in data_text("batch_prompts.txt").splitlines() if line.strip())


@dataclass
class Sequence:
    number: int  # in order of arrival; 0 is the run's own
    ids: list[int]  # its prompt, then its new tokens
    prompt_len: int
    max_new: int
    done: bool = False

    @property
    def new(self) -> int:
        return len(self.ids) - self.prompt_len


class ContinuousBatch:
    """Up to `size` sequences decoded together: `first` (the run's own) and arrivals made by
    `request(number)` → (prompt ids, max new tokens)."""

    def __init__(self, size: int, first: Sequence, request: Callable[[int], tuple[list[int], int]], eos_ids: set[int], ignore_eos: bool, pad_id: int):
        self.size = size
        self.rows = [first]
        self.pad = [0]  # left padding of each row in the cache
        self.request = request
        self.eos_ids, self.ignore_eos, self.pad_id = eos_ids, ignore_eos, pad_id
        self.waiting: deque[Sequence] = deque()
        self.done: deque[Sequence] = deque(maxlen=MAX_DONE)
        self.arrived = 0
        self.steps = 0
        self.step_tokens = 0  # every row's new tokens in the last step, arrivals' first included

    # ------------------------------------------------------------ the queue
    def resize(self, size: int) -> None:
        """A new batch size: rows beyond it go back to the front of the queue, their tokens so far kept."""
        self.size = size
        for seq in reversed(self.rows[size:]):
            self.waiting.appendleft(seq)
        del self.rows[size:], self.pad[size:]

    def _arrive(self) -> None:
        """One arrival every ARRIVAL_STEPS steps; a queue as long as the batch turns the next away."""
        self.steps += 1
        if self.steps % ARRIVAL_STEPS == 1 and len(self.waiting) < self.size:
            self.arrived += 1
            ids, max_new = self.request(self.arrived)
            self.waiting.append(Sequence(self.arrived, list(ids), len(ids), max_new))

    def _leave(self, cache) -> None:
        """Finished sequences (never row 0: its end ends the run) out of the batch and the cache."""
        keep = [i for i, seq in enumerate(self.rows) if i == 0 or not seq.done]
        if len(keep) == len(self.rows):
            return
        self.done.extend(seq for i, seq in enumerate(self.rows) if i not in keep)
        self.rows = [self.rows[i] for i in keep]
        self.pad = [self.pad[i] for i in keep]
        shared = min(self.pad)
        self.pad = [p - shared for p in self.pad]
        if cache is not None:
            index = to_device(keep, str(cache.layers[0].keys.device))  # without a sync: see to_device
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, index)[:, :, shared:]
                layer.values = layer.values.index_select(0, index)[:, :, shared:]

    def _join(self, cache, new_cache) -> None:
        """An arrival's cache (one row) joined to the batch's, the shorter padded on the left."""
        length, new_len = self.cache_len(cache), new_cache.layers[0].keys.shape[-2]
        grow, new_pad = max(0, new_len - length), max(0, length - new_len)
        for layer, new in zip(cache.layers, new_cache.layers, strict=True):
            layer.keys = torch.cat([F.pad(layer.keys, (0, 0, grow, 0)), F.pad(new.keys, (0, 0, new_pad, 0))])
            layer.values = torch.cat([F.pad(layer.values, (0, 0, grow, 0)), F.pad(new.values, (0, 0, new_pad, 0))])
        self.pad = [p + grow for p in self.pad] + [new_pad]

    def _take(self, seq: Sequence, tokens: list[int]) -> None:
        """A row's new tokens, unless it is done; it is done at its end of sequence or its length."""
        if seq.done or not tokens:
            return
        seq.ids.extend(tokens)
        self.step_tokens += len(tokens)
        seq.done = seq.new >= seq.max_new or (not self.ignore_eos and tokens[-1] in self.eos_ids)

    # ------------------------------------------------------------ reading
    @staticmethod
    def cache_len(cache) -> int:
        return 0 if cache is None else cache.layers[0].keys.shape[-2]

    def cached_tokens(self) -> int:
        """The rows' own tokens in the cache: each row's all but its newest."""
        return sum(len(seq.ids) - 1 for seq in self.rows)

    def view(self) -> list[list[int]]:
        """Each row as the Step event carries it: [number, prompt tokens, new tokens, max new tokens]."""
        return [[seq.number, seq.prompt_len, seq.new, seq.max_new] for seq in self.rows]

    # ------------------------------------------------------------ steps
    def _mask(self, length: int, queries: int, device: str) -> torch.Tensor:
        """[rows, 1, queries, length]: which columns each of the last `queries` attends to: its
        row's own, up to itself. A padding query attends to itself alone, so its states stay finite
        (no row reads them: a NaN there would still spread through the weights' zeros). A 4-D mask
        is used as given, where from a 2-D one transformers builds its own and first asks the host
        whether any column is padding: a second host read a step (tests/engine/test_host_reads.py)."""
        cols = torch.arange(length, device=device)
        at = torch.arange(length - queries, length, device=device)[:, None]
        own = (cols >= to_device(self.pad, device)[:, None, None]) & (cols <= at)
        return (own | (cols == at)).unsqueeze(1)

    def _forward(self, model, ids, cache, positions, mask):
        kw = {cache_kwarg(type(model)): cache}
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=cache is not None, logits_to_keep=1, **kw).logits

    def _batched(self, decoder, model, ids, cache, positions, mask, arrivals=(), f0: int | None = None) -> tuple[list[list[int]], int]:
        """One forward of every row, a token picked for each, read in one transfer with the
        arrivals' first tokens (picked on the device); row 0's tokens returned (the engine keeps
        them), the others' taken here. Its time as Decoder.decode's, from `f0` where the caller
        started the clock (before the arrivals' prefills)."""
        clock, mark = decoder.gpu_clock, decoder.mark
        if f0 is None:
            f0 = self._start_clock(decoder)
        with mark("tt.forward"):
            logits = self._forward(model, ids, cache, positions, mask)
        with mark("tt.sampling"):
            new = decoder.pick(logits[:, -1]).unsqueeze(1)
        if clock is not None:
            clock.end.record()
        forward_ns = time.perf_counter_ns() - f0
        with mark("tt.host_read"):
            rows = decoder.read(torch.cat([new, *(first for _, first in arrivals)]), logits[:1, -1:])
        for (seq, _), first in zip(arrivals, rows[len(self.rows) :], strict=True):  # an arrival's first token comes before its second
            self._take(seq, first)
        self.step_tokens += len(rows[0])
        for seq, tokens in zip(self.rows[1:], rows[1 : len(self.rows)], strict=True):
            self._take(seq, tokens)
        return [rows[0]], clock.ns() if clock is not None else forward_ns

    @staticmethod
    def _start_clock(decoder) -> int:
        if decoder.gpu_clock is not None:
            decoder.gpu_clock.start.record()
        return time.perf_counter_ns()

    def prefill(self, decoder, model, cache) -> tuple[list[list[int]], int]:
        """Every row's whole text in one forward, padded on the left, into a new cache (or none:
        then every step is this, and an arrival is one more row of it)."""
        self.step_tokens = 0
        self._leave(None)
        self._arrive()
        while len(self.rows) < self.size and self.waiting:
            self.rows.append(self.waiting.popleft())
        longest = max(len(seq.ids) for seq in self.rows)
        self.pad = [longest - len(seq.ids) for seq in self.rows]
        ids = to_device([[self.pad_id] * p + seq.ids for p, seq in zip(self.pad, self.rows, strict=True)], decoder.device)
        positions = to_device([[0] * p + list(range(len(seq.ids))) for p, seq in zip(self.pad, self.rows, strict=True)], decoder.device)
        return self._batched(decoder, model, ids, cache, positions, self._mask(longest, longest, decoder.device))

    def decode(self, decoder, model, cache, new_cache: Callable[[], object]) -> tuple[list[list[int]], int]:
        """The step of a running batch: finished rows leave, arrivals are prefilled alone into the
        free slots (the stall a server's decoding streams feel when a prompt arrives), then one
        token for every row in one forward; the arrivals' first tokens are read with the step's."""
        self.step_tokens = 0
        self._leave(cache)
        self._arrive()
        with decoder.mark("tt.step"):  # the anatomy's step (anatomy.py): the arrivals' prefills are in it
            f0 = self._start_clock(decoder)
            arrivals = []
            while len(self.rows) < self.size and self.waiting:
                seq = self.waiting.popleft()
                alone = new_cache()
                ids = to_device([seq.ids], decoder.device)
                with decoder.mark("tt.forward"):
                    logits = self._forward(model, ids, alone, torch.arange(len(seq.ids), device=ids.device).unsqueeze(0), None)
                self._join(cache, alone)
                self.rows.append(seq)
                arrivals.append((seq, decoder.pick(logits[:, -1]).view(1, 1)))
            length = self.cache_len(cache)
            running = len(self.rows) - len(arrivals)
            last = to_device([[seq.ids[-1]] for seq in self.rows[:running]], decoder.device)
            last = torch.cat([last, *(first for _, first in arrivals)])
            positions = to_device([[length - p] for p in self.pad], decoder.device)
            return self._batched(decoder, model, last, cache, positions, self._mask(length + 1, 1, decoder.device), arrivals, f0)
