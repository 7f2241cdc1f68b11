"""The CPU int8 and int4 weights: checked against the quantization formula, and as a variant of the real model."""

import pytest
import torch

from tui_app.engine import native
from tui_app.engine.levers import quant_note, quantize
from tui_app.engine.models import cache_kwarg
from tui_app.engine.quant import (
    Int4Linear,
    Int8Linear,
    int4_weights,
    int8_weights,
    joined,
)

pytestmark = pytest.mark.kernels


def _reference(linear: torch.nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8, computed independently: round(w / s) with s = max|w| / 127
    (levels rounded in fp32 as the module does: a tie rounded in fp64 can land one level away),
    products in fp64. Also the most the kernel's int16 activations may move each output: every
    activation rounded to a step of max|x| / QMAX moves by at most half a step, times the sum of
    that row's |weights|."""
    w = linear.weight.detach().float()
    s = w.abs().amax(dim=1, keepdim=True) / 127
    wq = (w / s).round().double() * s.double()
    y = x.double() @ wq.t()
    if linear.bias is not None:
        y = y + linear.bias.double()
    step = x.double().abs().amax(dim=-1, keepdim=True) / QMAX
    return y, step / 2 * wq.abs().sum(dim=1)


def _reference4(linear: torch.nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 in groups of 32, computed independently: min and s = (max - min) / 15
    rounded to fp16 (Q4_1's), q = round((w - min) / s), w = s q + min; the kernel's int16
    activations (one step per token, as the int8 kernel's) move each output by at most half a
    step times the row's sum of s q."""
    w = linear.weight.detach().float()
    g = w.view(w.shape[0], -1, 32)
    lo = g.amin(dim=-1, keepdim=True).half().float()
    s = ((g.amax(dim=-1, keepdim=True) - lo) / 15).half().float()
    q = ((g - lo) / s).round().clamp(0, 15).double()
    sq = (q * s.double()).view_as(w)
    y = x.double() @ (sq + lo.double().expand_as(g).reshape_as(w)).t()
    if linear.bias is not None:
        y = y + linear.bias.double()
    step = x.double().abs().amax(dim=-1, keepdim=True) / QMAX
    return y, step / 2 * sq.sum(dim=1)


QMAX = 127 * 256 + 127  # the kernels' int16 activations: the largest whose high byte fits int8

FORMATS = {"int8": (Int8Linear, _reference), "int4": (Int4Linear, _reference4)}


def _assert_within(y: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> None:
    err = (y.double() - ref).abs()
    slack = 1e-5 * ref.abs() + 1e-5  # fp32 accumulation
    assert bool((err <= bound + slack).all()), f"max excess {(err - bound - slack).max().item():.3g}"


@pytest.fixture(autouse=True, scope="module")
def _kernels():
    """Modules made with kernel=True call the ops, which exist once loaded: any test may run alone."""
    for name in ("int8_linear", "int4_linear"):
        native.load(name)


@pytest.mark.parametrize("name", ["int8_linear", "int4_linear"])
def test_the_kernels_build_here(name):
    """CI's machine is this one: the kernels must build, or quantized decode silently loses 2-7x."""
    assert native.load(name) is None


@pytest.mark.parametrize("out_features", [7, 1000, 3001])  # one chunk, and chunks that do not divide the rows
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_linear_equals_the_formula_eager(out_features, bias, kernel, fmt):
    cls, reference = FORMATS[fmt]
    torch.manual_seed(0)
    lin = torch.nn.Linear(576, out_features, bias=bias)
    q = cls(lin, kernel)
    assert q.rows < out_features or out_features == 7
    # a decode step, a batch of two, a short prefill, a long one (the kernel passes 4 tokens at a time)
    for shape in [(1, 576), (2, 1, 576), (1, 9, 576), (1, 70, 576)]:
        x = torch.randn(shape)
        ref, bound = reference(lin, x)
        with torch.inference_mode():
            y = q(x)
        if kernel:
            _assert_within(y, ref, bound)
        else:
            torch.testing.assert_close(y, ref.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 5, 48])
def test_the_int4_kernel_equals_the_formula_for_any_count_of_groups(groups):
    """The int4 kernel reads four groups per load and masks the last load: every remainder of the
    group count by four, and the default model's 1536-wide rows (48 groups)."""
    torch.manual_seed(groups)
    lin = torch.nn.Linear(32 * groups, 67, bias=True)
    q = Int4Linear(lin, kernel=True)
    for shape in [(3, 32 * groups), (1, 1, 32 * groups)]:  # the longer call first: stale buffer contents
        x = torch.randn(shape)
        ref, bound = _reference4(lin, x)
        with torch.inference_mode():
            _assert_within(q(x), ref, bound)


@pytest.mark.parametrize("k", [1, 17, 40, 1536])
def test_the_int8_kernel_equals_the_formula_for_any_row_length(k):
    """Activations are rounded 16 at a time and the rest one by one: lengths below, between and at
    multiples of 16; a long call first, so the reused per-thread buffer holds stale values."""
    torch.manual_seed(k)
    lin = torch.nn.Linear(k, 33, bias=True)
    q = Int8Linear(lin, kernel=True)
    for shape in [(5, 1, k), (1, 1, k)]:
        x = torch.randn(shape)
        ref, bound = _reference(lin, x)
        with torch.inference_mode():
            _assert_within(q(x), ref, bound)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("in_features,shape", [(0, (3, 0)), (0, (2, 0, 0)), (64, (0, 64)), (64, (1, 0, 64))])
def test_zero_columns_or_zero_tokens_give_torchs_result(fmt, kernel, in_features, shape):
    """No columns: every output is the bias (an empty sum), as torch's linear gives; no tokens: an
    empty result of the right shape. The kernels sized their thread tasks by the row length and
    died with SIGFPE on the first."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(in_features, 20, bias=True)
    q = FORMATS[fmt][0](lin, kernel)
    x = torch.randn(shape)
    with torch.inference_mode():
        y = q(x)
    assert y.shape == (*shape[:-1], 20)
    torch.testing.assert_close(y, lin(x).detach(), rtol=0, atol=0)


def test_int8_rows_padded_to_fours_widen_in_whole_chunks():
    """Without the kernel int8 rows are widened with their padding to a multiple of four: rows short
    of a four, in more rows than one chunk holds, still fit the shared chunk buffer and give the formula."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(17, 40000, bias=False)
    q = Int8Linear(lin, kernel=False)
    assert q.rows < lin.out_features
    x = torch.randn(1, 33, 17)
    ref, _ = _reference(lin, x)
    with torch.inference_mode():
        torch.testing.assert_close(q(x), ref.float(), rtol=1e-4, atol=1e-4)


def test_the_kernel_cannot_overflow_int32():
    """The worst case for the int8 kernel's int32 sums: every weight at 127 (stored as 255), every
    activation at the maximum (both its bytes 127), in the longest row it takes: 255 * 127 * K just
    below 2^31."""
    k = 65536
    lin = torch.nn.Linear(k, 4, bias=False)
    with torch.no_grad():
        lin.weight.fill_(0.5)
    x = torch.full((1, 1, k), 3.0)
    ref, bound = _reference(lin, x)
    with torch.inference_mode():
        _assert_within(Int8Linear(lin, kernel=True)(x), ref, bound)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_linear_compiled_equals_the_formula(fmt, kernel):
    """Compiled, the kernel is called from inductor's code; without it, the widened matmul is traced."""
    cls, reference = FORMATS[fmt]
    native.key_compiles_to_this_cpu()  # as the engine's compile does: a cache of another CPU's gave NaNs
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 300, bias=True)
    fn = torch.compile(cls(lin, kernel=kernel), dynamic=False)
    for shape in [(1, 1, 64), (2, 1, 64), (1, 33, 64)]:
        x = torch.randn(shape)
        ref, bound = reference(lin, x)
        with torch.inference_mode():
            _assert_within(fn(x), ref, bound + 1e-4 * ref.abs())


@pytest.mark.slow
def test_a_compiled_step_does_not_check_packed_weights_for_aliasing():
    """Dynamo checks every buffer of a compiled step against every other for aliasing on each call
    (1.3 ms of a 10 ms int8 step of the default model); packed weights are parameters, exempt."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(Int8Linear(torch.nn.Linear(64, 64), kernel=True), Int4Linear(torch.nn.Linear(64, 64), kernel=True))

    def step(x):
        return model(x)

    with torch.inference_mode():
        torch.compile(step, dynamic=False)(torch.randn(1, 64))
    (entry,) = torch._dynamo.eval_frame._debug_get_cache_entry_list(step.__code__)
    checked = [line for line in str(entry.guard_manager).splitlines() if "NO_TENSOR_ALIASING" in line]
    assert not [line for line in checked if any(n in line for n in ("qweight", "packed", "scale", "mins"))]


def own_bytes(variant, model) -> int:
    """Bytes of the tensors `variant` holds and `model` does not, each tensor counted once."""
    shared = {id(p) for p in model.parameters()}
    own = {id(p): p for p in variant.parameters() if id(p) not in shared}
    return sum(p.numel() * p.element_size() for p in own.values())


def test_a_failed_kernel_build_gives_the_reason_and_plain_torch(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("TOKENTOP_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    reason = native.load("int8_linear")
    assert reason and "no-such-compiler could not run" in reason
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 10)
    model = int8_weights(torch.nn.Sequential(lin))
    assert model[0].kernel is False
    assert quant_note("int8", "cpu", model) == f"int8 without its C++ kernel, every weight widened (slower): {reason}"
    why4 = native.load("int4_linear")
    assert quant_note("int4", "cpu", model) == f"int4 on torchao's IntxWeightOnly g32, LM head fp (slower; our kernel: {why4})"
    x = torch.randn(1, 1, 64)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), _reference(lin, x)[0].float(), rtol=1e-4, atol=1e-4)


def test_int4_on_rows_that_do_not_split_into_groups_says_torchao_serves_it():
    """A layer of 40 inputs cannot take groups of 32, so quantize hands such a model to torchao:
    with the kernel built, the note must still name torchao and the reason, not say "int4"."""
    model = torch.nn.Sequential(torch.nn.Linear(40, 8))
    assert quant_note("int4", "cpu", model) == (
        "int4 on torchao's IntxWeightOnly g32, LM head fp (slower; our kernel: rows that do not split into groups of 32)"
    )


def test_int4_variant_of_the_real_model(plain):
    """Our int4 keeps the GGUF's own layout (Q4_1: groups of 32, a scale and a min each), so on
    this model it costs almost no perplexity (torchao's symmetric int4 cost 20 %); the LM head is
    int8 (in int4 it cost 8 %); the variant shares the embedding and adds only its packed bytes."""
    model = plain.model
    q = quantize(model, "int4", "cpu", torch.float32)
    assert isinstance(q.lm_head, Int8Linear) and q.lm_head.kernel
    layers = [m for m in q.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 30 * 7 and all(m.kernel for m in layers)
    assert q.get_input_embeddings().weight is model.get_input_embeddings().weight
    head = q.lm_head.out_features * (q.lm_head.in_features + 4)
    assert own_bytes(q, model) == head + sum(m.out_features * m.in_features * (1 / 2 + 4 / 32) for m in layers)
    assert quant_note("int4", "cpu", q) == "int4"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_variants_layers_are_slices_of_one_tensor_per_kind(plain, fmt):
    """A compiled step pays per tensor it takes, so each packed kind of a variant's layers is one
    parameter; each layer's slice of it holds what quantizing its own linear alone gives, and the
    layer computes the same outputs as that lone layer."""
    model = plain.model
    cls = FORMATS[fmt][0]
    q = quantize(model, fmt, "cpu", torch.float32)
    layers = {n: m for n, m in q.named_modules() if isinstance(m, cls)}
    for name in cls.packs:
        assert len({id(getattr(m, name)) for m in layers.values()}) == 1
    originals = dict(model.named_modules())
    torch.manual_seed(0)
    for qname in list(layers)[::23]:
        alone = cls(originals[qname], kernel=True)
        for name in cls.packs:
            assert torch.equal(layers[qname]._w(name), getattr(alone, name))
        for x in (torch.randn(1, 1, alone.in_features), torch.randn(1, 35, alone.in_features)):
            with torch.inference_mode():
                assert torch.equal(layers[qname](x), alone(x))


def test_int8_variant_of_the_real_model_shares_its_fp_tensors(plain):
    """Every linear layer, LM head included, is int8 on the kernel; the embedding and norms are the
    original's own tensors, so the variant adds only its int8 bytes; the original model is untouched."""
    model = plain.model
    before = {n: p.data_ptr() for n, p in model.named_parameters()}
    q = quantize(model, "int8", "cpu", torch.float32)
    assert not [m for m in q.modules() if isinstance(m, torch.nn.Linear)]
    assert isinstance(q.lm_head, Int8Linear) and isinstance(model.lm_head, torch.nn.Linear)
    assert all(m.kernel for m in q.modules() if isinstance(m, Int8Linear))
    assert quant_note("int8", "cpu", q) == "int8"
    assert q.get_input_embeddings().weight is model.get_input_embeddings().weight
    assert q.model.norm.weight is model.model.norm.weight
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == before
    linear_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert own_bytes(q, model) == linear_params + 4 * sum(m.out_features for m in q.modules() if isinstance(m, Int8Linear))


@pytest.mark.parametrize("fmt", FORMATS)
def test_joined_layers_give_their_parts_outputs_side_by_side(plain, fmt):
    """A decoder layer's q/k/v (and gate/up) as one layer over the same pool slices: the same numbers
    as the layers called one by one, decode and prefill; layers that are not neighbours in one pool
    (q and v, lone layers, fp ones) are not joined."""
    q = quantize(plain.model, fmt, "cpu", torch.float32)
    first, last = q.model.layers[0], q.model.layers[-1]
    groups = [[first.self_attn.q_proj, first.self_attn.k_proj, first.self_attn.v_proj], [last.mlp.gate_proj, last.mlp.up_proj]]
    torch.manual_seed(0)
    for layers in groups:
        joint = joined(layers)
        assert joint.out_features == sum(m.out_features for m in layers)
        for x in (torch.randn(1, 1, 576), torch.randn(1, 35, 576)):
            with torch.inference_mode():
                assert torch.equal(joint(x), torch.cat([m(x) for m in layers], dim=-1))
    assert joined([first.self_attn.q_proj, first.self_attn.v_proj]) is None
    lone = FORMATS[fmt][0]
    assert joined([lone(torch.nn.Linear(64, 8), kernel=True), lone(torch.nn.Linear(64, 8), kernel=True)]) is None
    assert joined([plain.model.model.layers[0].mlp.gate_proj, plain.model.model.layers[0].mlp.up_proj]) is None


@pytest.mark.parametrize("weights", [int8_weights, int4_weights])
def test_layers_join_only_where_no_padding_row_falls_inside(weights):
    """int8 and int4 rows are stored in tiles of 16, a layer's last tile padded with zero rows: a layer
    that does not fill its last tile joins only as the last of a group, whose outputs are still its parts' side by side."""
    torch.manual_seed(0)
    a, b, c = weights(torch.nn.Sequential(*(torch.nn.Linear(64, n, bias=False) for n in (16, 20, 16))))
    assert joined([a, b, c]) is None and joined([b, c]) is None
    joint = joined([a, b])
    assert joint.out_features == 36
    x = torch.randn(3, 64)
    with torch.inference_mode():
        assert torch.equal(joint(x), torch.cat([a(x), b(x)], dim=-1))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_variants_decode_step_through_joined_layers_gives_the_models_logits(plain, fmt):
    """The lean decode step calls the joined layers where the HF decoder layer calls q, k, v, gate
    and up one by one: the logits of a step after a 5-token prefill are the model's own, exactly."""
    from transformers import DynamicCache

    from tui_app.engine.lean import LeanDecode

    q = quantize(plain.model, fmt, "cpu", torch.float32)
    lean = LeanDecode(q)
    assert all(j is not None for j in lean.joints)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    caches = [DynamicCache(config=q.config), DynamicCache(config=q.config)]
    with torch.inference_mode():
        for cache in caches:
            q(input_ids=ids[:, :5], **{cache_kwarg(type(q)): cache}, use_cache=True)
        own = q(input_ids=ids[:, 5:], **{cache_kwarg(type(q)): caches[0]}, position_ids=torch.tensor([[5]]), use_cache=True).logits
        assert torch.equal(lean(ids[:, 5:], caches[1], torch.tensor([[5]])), own)
