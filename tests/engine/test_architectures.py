"""Every lever on an architecture other than the default model's: a Qwen2-style model (biases on
q/k/v, a GQA ratio of 2), built here from its config with seeded weights (tokentop never downloads;
no second pretrained model ships in a package this machine can install). Each lever must generate
all the tokens asked for (--ignore-eos) and, where it is exact, the plain greedy tokens."""

import pytest
import torch

from monitors.events import EngineError, Step
from tests.helpers.tiny_models import save_tiny
from tui_app.commands.bench import apply_levers
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest

NEW = 12


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("qwen2")
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=49152,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    save_tiny(Qwen2ForCausalLM(cfg), folder)
    events: list = []
    engine = Engine(EngineConfig(model=str(folder)), events.append)
    engine.load()
    engine.events = events
    return engine


def _run(engine, combo):
    assert apply_levers(engine, combo) == ""
    engine.events.clear()
    prompt = [(13 * i) % 4000 + 5 for i in range(24)] * 2  # a repeat, so prompt lookup has proposals
    fin = engine.run(RunRequest(prompt_ids=prompt, max_new_tokens=NEW, ignore_eos=True))
    errors = [e.message for e in engine.events if isinstance(e, EngineError)]
    assert fin is not None and not errors, errors
    assert fin.n_tokens == NEW and fin.stop_reason == "max tokens", (combo, fin.stop_reason, fin.n_tokens)
    return [s.token_ids for s in engine.events if isinstance(s, Step)]


def _flat(steps):
    return [t for step in steps for t in step]


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["off", "int8", "int4"])
def test_every_lever_generates_every_token_on_a_second_architecture(qwen2, quant):
    eager = _flat(_run(qwen2, {"quant": quant}))
    assert _flat(_run(qwen2, {"quant": quant, "compile": True})) == eager  # compiled = eager, same weights
    if quant == "off":
        assert _flat(_run(qwen2, {"spec": "lookup"})) == eager
        assert _flat(_run(qwen2, {"spec": "draft"})) == eager
        assert _flat(_run(qwen2, {"batch": 2})) == eager  # row 0 (the events carry it; every row is the same prompt)
        assert _flat(_run(qwen2, {"cache": False})) == eager
