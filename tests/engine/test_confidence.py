"""Each token's confidence (the o key's colouring): the engine's probability of the token it
picked, against the model's own softmax over the whole text, recomputed apart in one forward."""

import pytest
import torch

from monitors.events import Step
from tui_app.commands.bench import apply_levers
from tui_app.requests import Confidence, RunRequest

STORY = RunRequest(preset="story", max_new_tokens=24, ignore_eos=True)  # a retelling: prompt lookup's drafts are accepted
# Without a cache each token runs the whole prompt again: 24 passes of the story's took 30 s alone
# (the Zen 4, 2026-11-30), and the path under test, the last place's logits, is the same on a short one.
SHORT = RunRequest(preset="short", max_new_tokens=24, ignore_eos=True)


@pytest.fixture
def confident(plain):
    plain.command(Confidence(on=True))
    yield plain
    plain.command(Confidence(on=False))


def steps_of(engine, events, request: RunRequest = STORY) -> list[Step]:
    events.clear()
    engine.run(request)
    return [e for e in events if isinstance(e, Step)]


@pytest.mark.parametrize("levers", [{}, {"spec": "lookup"}, {"batch": 2}, {"cache": False}], ids=["plain", "lookup", "batch2", "no-cache"])
def test_each_tokens_confidence_is_the_models_softmax_at_its_place(confident, collect, levers):
    assert apply_levers(confident, levers) == ""
    request = SHORT if levers.get("cache") is False else STORY
    steps = steps_of(confident, collect, request)
    tokens = [t for s in steps for t in s.token_ids]
    got = [p for s in steps for p in s.confidence]
    assert all(len(s.confidence) == len(s.token_chars) == s.n_tokens and sum(s.token_chars) == len(s.text) for s in steps)
    ids, _ = confident.prompt_ids(request)
    with torch.inference_mode():
        logits = confident.model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1].float()
    want = logits.softmax(-1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()
    assert max(abs(g - w) for g, w in zip(got, want, strict=True)) < 2e-3, (got, want)
    assert min(got) < 0.9 < max(got)  # a story has tokens the model is sure of and tokens it is not
    if levers.get("spec"):
        assert any(s.accepted for s in steps)  # the kept drafts' probabilities came from a verify step


def test_confidence_is_measured_only_once_asked_for(plain, collect):
    assert all(not s.confidence for s in steps_of(plain, collect))
    plain.command(Confidence(on=True))
    try:
        assert all(s.confidence for s in steps_of(plain, collect))
    finally:
        plain.command(Confidence(on=False))
    assert all(not s.confidence for s in steps_of(plain, collect))
