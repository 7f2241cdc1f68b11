"""What a run's tokens are checked against: the plain greedy run of the same prompt (cache,
compile and speculation must reproduce it exactly) and each weight variant's perplexity on a fixed
text (what quantization costs).

`Engine.load` makes one for the model it loaded; the weight variant to measure is handed in.
"""

from __future__ import annotations

import math
import sys

import torch

from tui_app.prompts import reference_text


class Quality:
    def __init__(self, cfg, tok, device: str, context_len: int):
        self.cfg = cfg  # its temperature is read at each comparison
        self.tok, self.device, self.context_len = tok, device, context_len
        self._ppl: dict[str, float | None] = {}
        self._reference: dict[tuple, list[int]] = {}
        self._answer_at: dict[tuple, int | None] = {}  # where each reference's answer begins

    def compare(
        self, prompt_ids: list[int], out_ids: list[int], ignore_eos: bool, plain: bool, answer_at: int | None = 0, budgeted: bool = False
    ) -> tuple[int | None, str]:
        """The first token where this run leaves the plain greedy run of its prompt, and the note the
        runs table shows. A `plain` run that completes becomes (or extends) that reference.
        `answer_at`: where the run's answer begins (after its think span; None: never). A
        `budgeted` run's thinking was cut on purpose, so its answer is compared with the
        reference's answer: what the budget changed in what the user reads."""
        key = (tuple(prompt_ids), ignore_eos)
        ref = self._reference.get(key)
        if self.cfg.temperature > 0:
            return None, "sampled: not compared"
        if ref is not None:
            if budgeted and answer_at is not None:
                return self._compare_answers(key, out_ids, answer_at)
            # Every greedy run is checked against plain greedy: cache, compile and speculation must
            # match it exactly, so a mismatch here is a bug made visible, not a quality trade-off.
            first_diff = _first_diff(ref, out_ids)
            if plain and first_diff is None and len(out_ids) > len(ref):
                self._reference[key], self._answer_at[key] = list(out_ids), answer_at
            return first_diff, "identical" if first_diff is None else f"differs at token {first_diff}"
        if plain:
            self._reference[key], self._answer_at[key] = list(out_ids), answer_at
            return None, "reference"
        return None, "no reference yet"

    def _compare_answers(self, key: tuple, out_ids: list[int], answer_at: int) -> tuple[int | None, str]:
        ref, ref_at = self._reference[key], self._answer_at[key]
        if ref_at is None:
            return None, "answer not compared: plain's run ended thinking"
        first = _first_diff(ref[ref_at:], out_ids[answer_at:])
        return (None, "answer identical") if first is None else (answer_at + first, f"answer differs at token {first}")

    @torch.inference_mode()
    def perplexity(self, level: str, model) -> float | None:
        """Perplexity of the fixed reference text under a weight variant (cached per variant), in one
        prefill. A variant with our kernels computes it there as decode does (the kernels take
        every length, their rounded activations included; tests check it against a token-by-token
        decode): measured on the default model, rounding the int4 kernel's activations to int8 per
        group moved it from 24.56 to 25.00."""
        if level not in self._ppl:
            if model is None:
                return None
            ids = self.tok(reference_text(), return_tensors="pt")["input_ids"][:, : min(512, self.context_len)].to(self.device)
            vocab = model.get_input_embeddings().num_embeddings
            if int(ids.max()) >= vocab:  # a tokenizer larger than the model's vocabulary: no honest number
                self._ppl[level] = None
                return None
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
            nll = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
            nll_f = float(nll)  # a random-weight model's can pass exp's float range: its perplexity is then inf, said so
            self._ppl[level] = math.exp(nll_f) if nll_f < math.log(sys.float_info.max) else math.inf
        return self._ppl[level]


def _first_diff(ref: list[int], out: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(ref, out, strict=False)):  # a run may be shorter or longer than its reference
        if a != b:
            return i
    return None
