"""One step of generation: a forward over the new tokens, the next token picked on the device, one
device→host read of what was picked; the prompt's tokens a run starts from, and the text the new
tokens make, detokenized as they come.

Prefill (the whole text, a new cache), decode (the last token of each sequence) and verify (the
last token and the proposals of speculative decoding, checked in one forward) are the three kinds
of step the engine's loop runs; the loop itself (generation.py) decides which, and when.
"""

from __future__ import annotations

import time

import torch

from monitors.text import plural
from tui_app.engine import devices
from tui_app.engine.anatomy import no_mark
from tui_app.engine.lean import LeanDecode
from tui_app.engine.models import cache_kwarg, to_device
from tui_app.engine.speculative import accept_greedy
from tui_app.prompts import preset_prompt
from tui_app.requests import RunRequest


class PromptError(ValueError):
    """Bad prompt or length settings; the message says what to do."""


def prompt_tokens(tok, req: RunRequest, context_len: int) -> tuple[list[int], str]:
    """The request's prompt as token ids and text, checked against the context; PromptError says what to do."""
    if req.max_new_tokens <= 0:
        raise PromptError(f"max new tokens must be at least 1 (got {req.max_new_tokens})")
    if req.max_new_tokens >= context_len:
        raise PromptError(f"max new tokens {req.max_new_tokens} does not fit the model's context of {context_len} tokens")
    if req.prompt_ids is not None:
        ids, text = list(req.prompt_ids), tok.decode(req.prompt_ids)
    else:
        try:
            text = req.prompt if req.prompt is not None else preset_prompt(req.preset, req.prompt_file)
        except ValueError as exc:
            raise PromptError(str(exc)) from None
        if not text.strip():
            raise PromptError("the prompt is empty; type some text or choose a preset")
        if req.chat and getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
            ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        else:
            ids = tok(text)["input_ids"]
    if not ids:
        raise PromptError("the prompt tokenized to nothing")
    room = context_len - req.max_new_tokens
    if len(ids) > room:
        if not req.truncate:
            raise PromptError(
                f"the prompt is {plural(len(ids), 'token')} and {plural(req.max_new_tokens, 'new token')} are asked for, "
                f"but the model's context is {context_len}; shorten it, ask for fewer tokens, or pass --truncate left"
            )
        ids = ids[-room:]
    return ids, text


class GpuClock:
    """Two device events around a step's forward and pick, read after the step's own host read
    (which waits for them): the GPU's time for them, with no sync of its own. On the host,
    launching is all a GPU forward's clock would see. devices.timing_events makes them (None
    where the device's events do not time: then the host's clock is the step's)."""

    def __init__(self, events):
        self.start, self.end = events

    @classmethod
    def on(cls, device: str) -> GpuClock | None:
        events = devices.timing_events(device, torch)
        return cls(events) if events is not None else None

    def ns(self) -> int:
        return round(self.start.elapsed_time(self.end) * 1e6)


class Decoder:
    """Steps on one device. `cfg` is the engine's configuration, read at each pick (temperature, top_p)."""

    def __init__(self, cfg, device: str, split: bool):
        from transformers import DynamicCache

        self.cfg = cfg
        self.device = device
        self.split = split  # accelerate's hooks move activations between devices: the model's own forward
        self.gen = torch.Generator(device)  # sampling stays on the device: no sync for the draw
        self._dynamic_cache = DynamicCache
        self._lean: dict[int, LeanDecode | None] = {}  # per weight variant (id of the module)
        # A profiler range per part of a decode step while its anatomy is taken (anatomy.py);
        # else a shared null context: four of them cost a step about 0.6 µs (docs/performance.md).
        self.mark = no_mark
        self.gpu_clock = GpuClock.on(device)
        self.confidence = False  # measure the chosen tokens' probabilities (the Confidence command)
        self.last_p: list[float] = []  # row 0's, of the last step's new tokens, when measured
        self.rejected: list[int] = []  # the last verify step's rejected proposals
        self.routes: list[torch.Tensor] | None = None  # an MoE's routing counts of the step (routing.py)
        self.routed: list = []  # what the last read brought back of them

    def lean_step(self, model) -> LeanDecode | None:
        key = id(model)
        if key not in self._lean:
            # Split over devices, the model's own forward: its outermost hook brings the logits back.
            self._lean[key] = LeanDecode(model) if LeanDecode.supports(model) and not self.split else None
        return self._lean[key]

    def forward(self, model, ids: torch.Tensor, cache, pos: int, keep: int = 1, fn=None) -> torch.Tensor:
        n = ids.shape[1]
        if n == 1:  # the cheapest way to a [B, 1] tensor; it is the compiled step's input (measured)
            position_ids = torch.full((ids.shape[0], 1), pos, device=ids.device)
        else:
            position_ids = torch.arange(pos, pos + n, device=ids.device).unsqueeze(0).expand(ids.shape[0], -1)
        if fn is not None:  # a compiled decode step
            return fn(ids, cache, position_ids)
        if n == 1 and isinstance(cache, self._dynamic_cache) and (lean := self.lean_step(model)) is not None:
            return lean(ids, cache, position_ids)
        out = model(input_ids=ids, **{cache_kwarg(type(model)): cache}, position_ids=position_ids, use_cache=cache is not None, logits_to_keep=keep)
        return out.logits

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """Next token per row from last-position logits [B, V]."""
        if self.cfg.temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits.float() / self.cfg.temperature, dim=-1)
        if self.cfg.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > self.cfg.top_p
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p.masked_fill(drop, 0))  # a boolean index would sync
        # torch.multinomial's own draw for one sample (argmax of p / Exp(1) noise), without its
        # validity check, which reads the probabilities' min and max on the host: two syncs a token.
        noise = torch.empty_like(probs).exponential_(1, generator=self.gen)
        return (probs / noise).argmax(-1)

    def read(self, new: torch.Tensor, logits: torch.Tensor, chosen: bool = True) -> list[list[int]]:
        """The step's one device→host transfer: the new tokens [B, k]; with confidence on, also the
        model's probability of row 0's picks, from its logits [1, k, V] (`chosen` False: the top
        probability at each of the logits' places, row 0's picks being the argmax there), packed into
        the same transfer as float32 (exact for token ids below 2^24)."""
        self.rejected = []
        # --device-map splits the layers over devices: a copy to the tokens' device, queued (no read of its own)
        routes = [torch.cat([r if r.device == new.device else r.to(new.device, non_blocking=True) for r in self.routes])] if self.routes else []
        n, k = new.numel(), new.shape[1]
        if not self.confidence:
            self.last_p = []
            if not routes:
                return new.tolist()
            flat = torch.cat([new.flatten(), *routes]).tolist()
            self.routed = flat[n:]
            return [flat[i : i + k] for i in range(0, n, k)]
        logp = torch.log_softmax(logits[0].float(), dim=-1)
        p = (logp.gather(-1, new[0].unsqueeze(-1)).squeeze(-1) if chosen else logp.amax(-1)).exp()
        # float32 is exact for token ids and a step's counts below 2^24
        flat = torch.cat([new.flatten().float(), p, *(r.float() for r in routes)]).tolist()
        self.last_p = flat[n : n + p.numel()]
        self.routed = flat[n + p.numel() :]
        return [[int(t) for t in flat[i : i + k]] for i in range(0, n, k)]

    def prefill(self, model, tokens: list[list[int]], cache) -> tuple[list[list[int]], int]:
        """The whole text in one forward; without the cache, every step is this."""
        ids = to_device(tokens, self.device)
        clock = self.gpu_clock
        f0 = time.perf_counter_ns()
        if clock is not None:
            clock.start.record()
        logits = self.forward(model, ids, cache, 0)
        new = self.pick(logits[:, -1]).unsqueeze(1)
        if clock is not None:
            clock.end.record()
        forward_ns = time.perf_counter_ns() - f0
        rows = self.read(new, logits[:1, -1:])
        return rows, clock.ns() if clock is not None else forward_ns

    def decode(self, model, tokens: list[list[int]], cache, fn=None) -> tuple[list[list[int]], int]:
        mark = self.mark
        clock = self.gpu_clock
        with mark("tt.step"):
            last = to_device([[row[-1]] for row in tokens], self.device)
            f0 = time.perf_counter_ns()
            if clock is not None:
                clock.start.record()
            with mark("tt.forward"):
                logits = self.forward(model, last, cache, len(tokens[0]) - 1, fn=fn)
            with mark("tt.sampling"):
                new = self.pick(logits[:, -1]).unsqueeze(1)
            if clock is not None:
                clock.end.record()
            forward_ns = time.perf_counter_ns() - f0
            with mark("tt.host_read"):
                rows = self.read(new, logits[:1, -1:])
        return rows, clock.ns() if clock is not None else forward_ns

    def verify(self, model, row: list[int], cache, props: torch.Tensor) -> tuple[list[list[int]], int, int, int]:
        """The last token and the proposals in one forward; keeps the proposals the target agrees
        with plus its own next token, and crops the rest from the cache."""
        last = to_device([[row[-1]]], self.device)
        clock = self.gpu_clock
        f0 = time.perf_counter_ns()
        if clock is not None:
            clock.start.record()
        feed = torch.cat([last, props.unsqueeze(0)], dim=1)
        logits = self.forward(model, feed, cache, len(row) - 1, keep=len(props) + 1)
        checked = torch.cat([props, logits[0].argmax(-1)])
        if clock is not None:
            clock.end.record()
        forward_ns = time.perf_counter_ns() - f0
        n = len(props)
        # The proposals cross with the target's choices: the step's one device→host transfer.
        checked_list = self.read(checked.unsqueeze(0), logits[:1], chosen=False)[0]
        if clock is not None:
            forward_ns = clock.ns()
        props_list, choice_list = checked_list[:n], checked_list[n:]
        n_acc = accept_greedy(props_list, choice_list)
        self.rejected = props_list[n_acc:]
        # A kept token is the target's own choice at its place: its probability is that place's.
        self.last_p = self.last_p[: n_acc + 1]
        gained = [*props_list[:n_acc], choice_list[n_acc]]
        cache.crop(-(n - n_acc))
        return [gained], forward_ns, n, n_acc


def extend_rows(
    tokens: list[list[int]], new_rows: list[list[int]], remaining: int, finished_rows: list[bool], eos_ids: set[int], ignore_eos: bool
) -> list[list[int]]:
    """Append each row's new tokens (at most `remaining`) and mark rows that reached an end of
    sequence; returns the new tokens with row 0's cut after its end of sequence."""
    new_rows = [row[:remaining] for row in new_rows]
    for row, add in zip(tokens, new_rows, strict=True):
        row.extend(add)
    if not ignore_eos:
        for i, add in enumerate(new_rows):
            for j, t in enumerate(add):
                if t in eos_ids:
                    finished_rows[i] = True
                    if i == 0:
                        new_rows[0] = add[: j + 1]
                    break
    return new_rows
