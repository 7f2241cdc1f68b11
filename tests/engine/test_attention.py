"""A decode step's attention over a static cache reads only the filled slots: checked against
SDPA over the whole cache with the empty slots masked out, and inside the real model's step."""

import pytest
import torch
import torch.nn.functional as F

from tui_app.engine import native
from tui_app.engine.lean import LeanDecode, use_own_attention
from tui_app.engine.models import cache_kwarg

pytestmark = pytest.mark.kernels


@pytest.fixture(autouse=True, scope="module")
def _kernel():
    assert native.load("decode_attention") is None


def _sdpa(q, k, v, position, scale):
    """What the compiled step computed before: every slot, the ones past `position` masked."""
    slots = k.shape[2]
    mask = torch.where(torch.arange(slots) <= position, 0.0, torch.finfo(torch.float32).min).view(1, 1, 1, -1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=scale).transpose(1, 2)


# the default model's heads (9 query, 3 K/V, 64 wide), a batch of two, plain multi-head attention,
# and head sizes that are not a multiple of the vector width
@pytest.mark.parametrize("batch,hq,hkv,dim", [(1, 9, 3, 64), (2, 9, 3, 64), (1, 4, 4, 16), (1, 2, 1, 24), (3, 6, 2, 5)])
@pytest.mark.parametrize("position", [0, 1, 100, 255])
def test_the_decode_attention_equals_masked_sdpa(batch, hq, hkv, dim, position):
    torch.manual_seed(position)
    q = torch.randn(batch, hq, 1, dim)
    k, v = torch.randn(2, batch, hkv, 256, dim).unbind(0)
    k[:, :, position + 1 :] = 1e4  # what lies past the position must not count
    scale = dim**-0.5
    ours = torch.ops.tokentop.decode_attention(q, k, v, torch.full((batch, 1), position), scale)
    assert ours.shape == (batch, 1, hq, dim)
    torch.testing.assert_close(ours, _sdpa(q, k, v, position, scale), rtol=1e-5, atol=1e-5)


def test_each_sequence_reads_up_to_its_own_position():
    """Rows at different positions: each row attends over its own filled slots (the kernel read row
    0's position for every row, so the others silently attended over the wrong slots)."""
    torch.manual_seed(3)
    positions = [0, 100, 255]
    q = torch.randn(3, 9, 1, 64)
    k, v = torch.randn(2, 3, 3, 256, 64).unbind(0)
    for b, p in enumerate(positions):
        k[b, :, p + 1 :] = 1e4
    ours = torch.ops.tokentop.decode_attention(q, k, v, torch.tensor(positions).view(3, 1), 0.125)
    for b, p in enumerate(positions):
        torch.testing.assert_close(ours[b : b + 1], _sdpa(q[b : b + 1], k[b : b + 1], v[b : b + 1], p, 0.125), rtol=1e-5, atol=1e-5)


def test_an_empty_batch_gives_an_empty_result():
    q, k = torch.randn(0, 2, 1, 16), torch.randn(0, 2, 8, 16)
    assert torch.ops.tokentop.decode_attention(q, k, k, torch.zeros(0, 1, dtype=torch.long), 1.0).shape == (0, 1, 2, 16)


def test_a_position_count_other_than_the_batch_is_refused_with_the_reason():
    q, k = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 16, 8)
    with pytest.raises(RuntimeError, match="position per sequence"):
        torch.ops.tokentop.decode_attention(q, k, k, torch.tensor([[3]]), 1.0)


def test_a_position_outside_the_cache_is_refused_with_the_reason():
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 16, 8)
    with pytest.raises(RuntimeError, match="position outside the cache"):
        torch.ops.tokentop.decode_attention(q, k, k, torch.tensor([[16]]), 1.0)


def test_the_models_static_step_reads_the_filled_slots_and_gives_sdpas_logits(engine):
    """The real model: a prompt written into a 256-slot static cache, then one decode step through
    the lean step with its own attention and with SDPA over the masked cache."""
    from transformers import StaticCache

    model = engine.model
    lean = LeanDecode(model)
    assert use_own_attention(model)  # on CPU, with the kernel built
    ids = torch.tensor([engine.tok.encode("The quick brown fox jumps over the lazy")])
    n = ids.shape[1]
    logits = {}
    for own in (True, False):
        lean.own_attention = own
        cache = StaticCache(config=model.config, max_cache_len=256)
        with torch.inference_mode():
            model(input_ids=ids, **{cache_kwarg(type(model)): cache}, position_ids=torch.arange(n)[None], use_cache=True)
            with torch.profiler.profile() as prof:
                step = lean.static_step(torch.tensor([[42]]), cache, torch.tensor([[n]]))
        calls = sum(e.name == "tokentop::decode_attention" for e in prof.events())
        assert calls == (model.config.num_hidden_layers if own else 0)
        logits[own] = step[0, -1]
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-4, atol=1e-4)
