"""The CPU int8 weights: checked against the quantization formula, and as a variant of the real model."""

import pytest
import torch

from tui_app.engine.levers import quantize
from tui_app.engine.quant import Int8Linear


def _reference(linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """Symmetric per-output-channel int8, computed independently: round(w / s) with s = max|w| / 127
    (levels rounded in fp32 as the module does: a tie rounded in fp64 can land one level away),
    products in fp64."""
    w = linear.weight.detach().float()
    s = w.abs().amax(dim=1, keepdim=True) / 127
    y = x.double() @ ((w / s).round().double() * s.double()).t()
    return (y if linear.bias is None else y + linear.bias.double()).float()


@pytest.mark.parametrize("out_features", [7, 1000, 3001])  # one chunk, and chunks that do not divide the rows
@pytest.mark.parametrize("bias", [False, True])
def test_int8_linear_equals_the_formula_eager(out_features, bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(576, out_features, bias=bias)
    q = Int8Linear(lin)
    assert q.rows < out_features or out_features == 7
    for shape in [(1, 576), (2, 1, 576), (1, 9, 576)]:  # a decode step, a batch of two, a prefill
        x = torch.randn(shape)
        torch.testing.assert_close(q(x), _reference(lin, x), rtol=1e-4, atol=1e-4)
    assert q.qweight.dtype == torch.int8 and q.qweight.abs().max() <= 127


@pytest.mark.slow
def test_int8_linear_compiled_decode_equals_the_formula():
    """Compiled, a one-token step is a fused multiply-and-sum over the int8 weight: same numbers."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 300, bias=False)
    q = Int8Linear(lin)
    fn = torch.compile(q, dynamic=False)
    for shape in [(1, 1, 64), (2, 1, 64), (1, 5, 64)]:
        x = torch.randn(shape)
        torch.testing.assert_close(fn(x), _reference(lin, x), rtol=1e-4, atol=1e-4)


def test_int8_variant_of_the_real_model_shares_its_fp_tensors(plain):
    """Every linear layer, LM head included, is int8; the embedding and norms are the original's own
    tensors, so the variant adds only its int8 bytes; the original model is untouched."""
    model = plain.model
    before = {n: p.data_ptr() for n, p in model.named_parameters()}
    q = quantize(model, "int8", "cpu", torch.float32)
    assert not [m for m in q.modules() if isinstance(m, torch.nn.Linear)]
    assert isinstance(q.lm_head, Int8Linear) and isinstance(model.lm_head, torch.nn.Linear)
    assert q.get_input_embeddings().weight is model.get_input_embeddings().weight
    assert q.model.norm.weight is model.model.norm.weight
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == before
    linear_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    own = sum(b.numel() * b.element_size() for m in q.modules() if isinstance(m, Int8Linear) for b in m.buffers())
    assert own == linear_params + 4 * sum(m.out_features for m in q.modules() if isinstance(m, Int8Linear))


def test_int8_linear_decodes_on_one_thread_and_gives_the_threads_back():
    torch.manual_seed(0)
    lin = torch.nn.Linear(576, 2000, bias=False)
    q = Int8Linear(lin)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(2, 1, 576)
        torch.testing.assert_close(q(x), _reference(lin, x), rtol=1e-4, atol=1e-4)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
