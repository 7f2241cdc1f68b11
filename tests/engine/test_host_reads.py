"""Reads of a tensor's value by the host, each a device→host sync on a GPU (the target: ≤ 1 per token).

The counter is checked on calls whose reads are known; then the engine on the real default model,
lever by lever, against `model.generate` on the same prompt."""

import pytest
import torch

from monitors.events import Step
from monitors.host_reads import count_host_reads
from tui_app.commands.bench import apply_levers
from tui_app.requests import RunRequest

N = 8


def test_the_counter_sees_each_kind_of_read_and_nothing_else():
    x = torch.arange(6)
    with count_host_reads() as n:
        y = (x * 2 + 1).argmax(-1).unsqueeze(0)  # device work only
        torch.cat([x, y]).sum()
    assert n.reads == 0
    with count_host_reads() as n:
        x.tolist()  # 1
        x[0].item()  # 2
        bool(x[1])  # 3
        int(x[2])  # 4
        x.numpy()  # 5
        [0, 1, 2][x[1]]  # 6: a tensor as a Python index
        x[x > 2]  # 7: boolean indexing sizes its output on the host
        torch.multinomial(torch.ones(4), 1)  # 8, 9: torch checks the probabilities' min and max
    assert n.reads == 9 and n.syncs is None
    assert "tolist" not in vars(torch.Tensor)  # the wrappers are gone


def reads_per_token(engine, events, req) -> float:
    engine.run(req)  # warm: a first run may compile or build
    events.clear()
    with count_host_reads() as n:
        engine.run(req)
    tokens = sum(s.n_tokens for s in events if isinstance(s, Step))
    assert tokens == N
    return n.reads / tokens


def test_generate_reads_each_token_and_more(engine):
    """generate checks every step whether all rows are done (`bool(unfinished.max() == 0)`) and
    sets up with a few more: the counter is not blind to the loop it is compared with."""
    ids, _ = engine.prompt_ids(RunRequest(preset="short"))
    with torch.inference_mode(), count_host_reads() as n:
        engine.model.generate(torch.tensor([ids]), max_new_tokens=N, min_new_tokens=N, do_sample=False)
    assert n.reads > N


@pytest.mark.slow
@pytest.mark.parametrize(
    "levers,preset,sampled",
    [
        ({}, "short", False),
        ({}, "short", True),
        ({"spec": "lookup"}, "story", False),
        ({"spec": "draft"}, "short", False),
        ({"compile": True}, "short", False),
        ({"quant": "int4", "compile": True}, "short", False),
        ({"batch": 2}, "short", False),
    ],
    ids=["plain", "sampled", "lookup", "draft", "compile", "int4-compile", "batch2"],
)
def test_the_engine_reads_at_most_once_per_token(plain, collect, levers, preset, sampled):
    assert apply_levers(plain, levers) == ""
    if sampled:
        plain.cfg.temperature, plain.cfg.top_p = 0.9, 0.95
    try:
        per_token = reads_per_token(plain, collect, RunRequest(preset=preset, max_new_tokens=N, ignore_eos=True))
    finally:
        plain.cfg.temperature, plain.cfg.top_p = 0.0, 1.0
    assert per_token <= 1, levers


def test_without_a_cache_transformers_reads_once_more_per_step(plain, collect):
    """Each full forward without a cache runs transformers' packed-sequence check on the position
    ids (masking_utils.find_packed_sequence_indices), a host read of its own: two a token."""
    assert apply_levers(plain, {"cache": False}) == ""
    assert reads_per_token(plain, collect, RunRequest(preset="short", max_new_tokens=N, ignore_eos=True)) <= 2
