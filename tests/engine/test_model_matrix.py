"""The architectures people run, each lever on each (docs/models.md has the table): Qwen3, Mistral
with a sliding window shorter than the run, Phi-3, GPT-2 and Qwen3-MoE, each a small config with
seeded weights made here (tokentop downloads nothing). Every lever generates every token asked for,
the exact ones (no cache, prompt lookup, a draft, batch 2 of distinct prompts, compile) the plain
greedy tokens (Mistral's sliding window refuses distinct prompts, and batches its prompt replicated); int8/int4 run,
or are refused with the reason where they would leave most weights in full precision (GPT-2's
Conv1D); an MoE's 3-D experts are quantized with the rest. The MoE's bytes a step reads count its active experts only."""

import math

import pytest
import torch

from monitors.events import Bandwidth, EngineError, LeverRefused, Phase, Step
from monitors.routing import step_weight_bytes
from monitors.routing_hooks import ONE, ROUTED
from tests.helpers.tiny_models import save_tiny
from tui_app.commands.bench import apply_levers
from tui_app.engine import levers as lv
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import Probe, RunRequest

NEW = 12
COMMON = {
    "vocab_size": 49152,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "eos_token_id": 2,
}
WINDOW = 16  # Mistral's sliding window: the 48-token prompt is past it before the first token


def _config(arch: str):
    import transformers as tf

    if arch == "qwen3":
        return tf.Qwen3ForCausalLM, tf.Qwen3Config(**COMMON, head_dim=32)
    if arch == "mistral":
        return tf.MistralForCausalLM, tf.MistralConfig(**COMMON, sliding_window=WINDOW)
    if arch == "phi3":
        return tf.Phi3ForCausalLM, tf.Phi3Config(**COMMON, pad_token_id=0)
    if arch == "gpt2":
        return tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=49152, n_embd=128, n_layer=3, n_head=4, n_positions=2048, eos_token_id=2, bos_token_id=1)
    moe = {"moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": []}
    return tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig(**COMMON, head_dim=32, **moe)


@pytest.fixture(scope="module", params=["qwen3", "mistral", "phi3", "gpt2", "qwen3moe"])
def arch(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    cls, cfg = _config(request.param)
    save_tiny(cls(cfg), folder)
    events: list = []
    engine = Engine(EngineConfig(model=str(folder)), events.append)
    engine.load()
    engine.events, engine.arch, engine.folder = events, request.param, folder
    return engine


def _tokens(engine, combo) -> list[int]:
    assert apply_levers(engine, combo) == "", combo
    engine.events.clear()
    prompt = [(13 * i) % 4000 + 5 for i in range(24)] * 2  # a repeat, so prompt lookup has proposals
    fin = engine.run(RunRequest(prompt_ids=prompt, max_new_tokens=NEW, ignore_eos=True))
    errors = [e.message for e in engine.events if isinstance(e, EngineError)]
    assert fin is not None and not errors, (engine.arch, combo, errors)
    assert fin.n_tokens == NEW and fin.stop_reason == "max tokens", (engine.arch, combo, fin.stop_reason)
    return [t for s in engine.events if isinstance(s, Step) for t in s.token_ids]


@pytest.mark.slow
def test_every_lever_on_each_architecture(arch):
    plain = _tokens(arch, {})
    for combo in ({"cache": False}, {"spec": "lookup"}, {"spec": "draft"}, {"batch": 2}, {"compile": True}):
        if combo == {"batch": 2} and arch.arch == "mistral":  # distinct prompts refused with the reason; the replicated batch runs
            assert "sliding-window" in apply_levers(arch, combo)
            arch.cfg.batch_prompts = "replicated"
        assert _tokens(arch, combo) == plain, (arch.arch, combo)
        arch.cfg.batch_prompts = "distinct"
        if "compile" in combo:  # the decode step ran compiled, not refused or fallen back
            assert arch.levers.compile and any(isinstance(e, Phase) and e.name == "compile" and e.done for e in arch.events), arch.arch
    for level in ("int8", "int4"):
        if arch.arch == "gpt2":
            arch.events.clear()
            assert apply_levers(arch, {"quant": level}) != ""
            (refused,) = [e for e in arch.events if isinstance(e, LeverRefused)]
            assert "Conv1D" in refused.reason and arch.levers.quant == "off", refused.reason
        elif arch.arch == "qwen3moe" and not lv._own(arch.model, level, arch.device):  # no kernel of ours here: torchao's path
            assert "torchao's" in apply_levers(arch, {"quant": level}) and arch.levers.quant == "off"
        else:
            _tokens(arch, {"quant": level})
            assert arch.levers.quant == level
    apply_levers(arch, {})


def test_an_moes_experts_are_quantized_and_counted_by_their_active_share(arch):
    """Qwen3-MoE's 3-D experts under int8: each expert's two matrices int8 layers (experts.py), about
    a quarter of the file's fp32 bytes of them (one byte a weight, a scale a row, rows padded); the
    bytes a step reads count k/n of them, beside the fp model's count of the same kind."""
    if arch.arch != "qwen3moe":
        pytest.skip("the MoE's experts")
    from safetensors import safe_open

    from tui_app.engine import bandwidth
    from tui_app.engine.experts import QuantExperts
    from tui_app.engine.quant import Int8Linear

    with safe_open(str(arch.folder / "model.safetensors"), "pt") as f:
        file_experts = sum(4 * math.prod(f.get_slice(n).get_shape()) for n in f.keys() if ".experts." in n)  # noqa: SIM118
    _tokens(arch, {"quant": "int8"})
    variant = arch.control.variants["int8"]
    blocks = [m for m in variant.modules() if isinstance(m, QuantExperts)]
    assert len(blocks) == arch.model.config.num_hidden_layers
    layers = [layer for m in blocks for layer in (*m.gate_up, *m.down)]
    assert all(isinstance(layer, Int8Linear) for layer in layers) and len(layers) == 2 * 8 * len(blocks)
    packed = sum(layer.nbytes() for layer in layers)
    assert 0.25 * file_experts <= packed <= 0.3 * file_experts, packed / file_experts
    cfg = arch.model.config
    idle = 1 - cfg.num_experts_per_tok / cfg.num_experts
    every = sum(bandwidth.tensor_bytes(t) for t in bandwidth._read_tensors(variant))
    assert bandwidth.weight_bytes(variant) == every - round(idle * packed)
    apply_levers(arch, {})


def test_an_moe_step_reads_its_active_experts_only(arch):
    """The bytes a decode step reads, by the safetensors file's own header: every tensor once, the
    untied input embedding a row a token (left out), the experts' k/n of them."""
    if arch.arch != "qwen3moe":
        pytest.skip("the MoE's count; the dense models' is test_anatomy's roofline test")

    from safetensors import safe_open

    cfg = arch.model.config
    active = cfg.num_experts_per_tok / cfg.num_experts
    # the rotary tables, not in the file (the routing counts are no weights)
    total = float(sum(b.numel() * b.element_size() for name, b in arch.model.named_buffers() if not name.endswith((ROUTED, ONE))))
    experts = 0
    with safe_open(str(arch.folder / "model.safetensors"), "pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            shape = f.get_slice(name).get_shape()
            if name.endswith("embed_tokens.weight"):
                continue
            total += math.prod(shape) * 4 * (active if ".experts." in name else 1.0)  # the file keeps one tensor an expert
            experts += math.prod(shape) * 4 if ".experts." in name else 0
    arch.events.clear()
    arch.command(Probe())  # measured at the next run's first decode step
    arch.run(RunRequest(prompt_ids=[5, 6, 7], max_new_tokens=3, ignore_eos=True))
    (bw,) = [e for e in arch.events if isinstance(e, Bandwidth)]
    assert bw.weight_bytes == pytest.approx(total, rel=1e-6) and bw.weight_bytes < arch.ready.weight_bytes
    assert bw.expert_bytes * cfg.num_hidden_layers * cfg.num_experts == experts  # one expert of one layer
    routing = arch.ready.routing  # a step that touched every expert of every layer read the whole file's experts
    every = step_weight_bytes(bw.weight_bytes, bw.expert_bytes, routing, cfg.num_hidden_layers * cfg.num_experts)
    assert every == pytest.approx(total + (1 - active) * experts, rel=1e-6)
    assert step_weight_bytes(bw.weight_bytes, bw.expert_bytes, routing, cfg.num_hidden_layers * cfg.num_experts_per_tok) == bw.weight_bytes
    from tui_app.ui.status_text import subtitle

    assert arch.ready.experts == "8 experts, 2 a token" and "MoE: 8 experts, 2 a token" in subtitle(arch.ready)


def test_speculation_switched_on_mid_run_past_mistrals_window_keeps_the_greedy_tokens(arch):
    """The cache made without speculation drops its sliding layers' past; switched on mid-run, the
    run rebuilds it (a re-prefill) so verify steps can crop it, and the text stays plain greedy's."""
    if arch.arch != "mistral":
        pytest.skip("the sliding window's case")
    from tui_app.requests import SetLever

    plain = _tokens(arch, {})
    arch.events.clear()
    sent: list = []

    def poll():
        decoded = sum(1 for e in arch.events if isinstance(e, Step) and e.kind == "decode")
        if decoded >= 3 and not sent:
            sent.append(SetLever("spec", "draft"))
            return sent
        return []

    prompt = [(13 * i) % 4000 + 5 for i in range(24)] * 2
    fin = arch.run(RunRequest(prompt_ids=prompt, max_new_tokens=NEW, ignore_eos=True), poll=poll)
    errors = [e.message for e in arch.events if isinstance(e, EngineError)]
    assert fin is not None and fin.n_tokens == NEW and not errors, errors
    kinds = [s.kind for s in arch.events if isinstance(s, Step)]
    assert "reprefill" in kinds and "verify" in kinds, kinds
    assert [t for s in arch.events if isinstance(s, Step) for t in s.token_ids] == plain
    apply_levers(arch, {})
