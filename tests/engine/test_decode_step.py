"""The fused decode step (kernels/decode_step.cpp) against the same step layer by layer: transformers'
own RMSNorm, RoPE and attention modules with our projection kernels, over a static cache."""

import pytest
import torch
from transformers import StaticCache

from tui_app.engine import native
from tui_app.engine.lean import LeanDecode
from tui_app.engine.models import cache_kwarg

pytestmark = pytest.mark.kernels

PROMPT = torch.tensor([[1, 504, 3, 88, 1200, 77, 9, 451, 2, 33]])
STEPS = 16


def test_the_fused_step_builds_here():
    """CI's machine is this one: without the op, quantized compiled decode loses a fifth."""
    assert native.load("decode_step") is None


def _decode(model, lean: LeanDecode, fused: tuple | None, batch: int):
    """Greedy tokens, logits per step and the cache after STEPS steps of lean.static_step."""
    lean.fused = fused
    cache = StaticCache(config=model.config, max_cache_len=64)
    ids = PROMPT.expand(batch, -1)
    with torch.inference_mode():
        logits = model(input_ids=ids, **{cache_kwarg(type(model)): cache}, position_ids=torch.arange(ids.shape[1])[None], use_cache=True).logits
        tok = logits[:, -1:].argmax(-1)
        tokens, per_step = [], []
        for i in range(STEPS):
            out = lean.static_step(tok, cache, torch.full((batch, 1), ids.shape[1] + i))
            tok = out[:, -1:].argmax(-1)
            tokens.append(tok[:, 0].tolist())
            per_step.append(out)
    return tokens, torch.stack(per_step), cache


@pytest.mark.parametrize(("level", "batch"), [("int8", 1), ("int4", 1), ("int4", 2)])
def test_the_fused_step_computes_what_the_layers_do(engine, level, batch):
    model = engine.control.variant(level)
    lean = LeanDecode(model)
    assert lean.use_fused_step()
    fused = lean.fused
    tokens, logits, cache = _decode(model, lean, None, batch)
    f_tokens, f_logits, f_cache = _decode(model, lean, fused, batch)
    assert f_tokens == tokens
    assert all(row == rows[0] for rows in f_tokens for row in rows)  # every row of a batch is the same prompt
    # Both round each projection's input to int16 per token, so a difference in the last float bit
    # of an input can move a rounding: measured, 8e-4 of the largest logit at most.
    assert (f_logits - logits).abs().max() <= 2e-3 * logits.abs().max()
    # The first layer's K/V come from the embedding through RMSNorm, q/k/v and RoPE alone: the same
    # rounded inputs, so the same to float rounding (measured 1e-6); later layers carry the drift
    # above (measured 1.3e-3 at most, relative to the layer's whole K or V).
    for i, (mine, theirs) in enumerate(zip(f_cache.layers, cache.layers, strict=True)):
        assert int(mine.cumulative_length) == int(theirs.cumulative_length) == PROMPT.shape[1] + STEPS
        for a, b in ((mine.keys, theirs.keys), (mine.values, theirs.values)):
            assert (a - b).norm() <= (1e-5 if i == 0 else 3e-3) * b.norm()
        assert not mine.keys[:, :, PROMPT.shape[1] + STEPS :].any()  # nothing written past the position


def test_the_fused_step_refuses_a_full_cache_and_unknown_tokens(engine):
    model = engine.control.variant("int4")
    lean = LeanDecode(model)
    assert lean.use_fused_step()
    cache = StaticCache(config=model.config, max_cache_len=PROMPT.shape[1])
    with torch.inference_mode():
        model(input_ids=PROMPT, **{cache_kwarg(type(model)): cache}, use_cache=True)
        with pytest.raises(RuntimeError, match="the static cache is full"):
            lean.static_step(PROMPT[:, :1], cache, torch.full((1, 1), PROMPT.shape[1]))
        with pytest.raises(RuntimeError, match="outside the vocabulary"):
            lean.static_step(torch.tensor([[model.config.vocab_size]]), cache, torch.full((1, 1), 0))
