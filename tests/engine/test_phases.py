"""A reasoning model in the engine: a small Qwen3 of seeded weights, made here, with the default
model's tokenizer extended by `<think>` and `</think>` and a chat template that opens the think
span, as DeepSeek-R1's and Qwen3's thinking templates do. A hook on the model's head forces the
span's close at a known step, so each phase's tokens are known exactly; the test reads each
token's phase itself, from the ids."""

from __future__ import annotations

import pytest

from monitors.events import RunFinished, Step
from tests.helpers.tiny_models import save_thinker
from tui_app.commands.run import row_line
from tui_app.core.session import Session
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest

CLOSE_AT = 9  # the head's call that picks `</think>`: the 10th new token


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinker")
    tok = save_thinker(folder)
    session = Session()
    engine = Engine(EngineConfig(model=str(folder)), session.feed)
    engine.load()
    return engine, session, tok


def forced_close(engine, close_id: int):
    """The head's `CLOSE_AT`-th call picks `</think>`; every other call is the model's own."""
    calls = [0]

    def hook(_module, _args, out):
        if calls[0] == CLOSE_AT:
            out[..., close_id] = out.max() + 100
        calls[0] += 1
        return out

    return engine.model.lm_head.register_forward_hook(hook)


def test_the_engine_splits_a_think_span_read_from_the_tokenizer(thinker):
    engine, session, tok = thinker
    close_id = tok.convert_tokens_to_ids("</think>")
    events: list = []
    session.listeners.append(events.append)
    handle = forced_close(engine, close_id)
    try:
        fin = engine.run(RunRequest(prompt="Why is the sky blue?", max_new_tokens=16, ignore_eos=True))
    finally:
        handle.remove()
    steps = [e for e in events if isinstance(e, Step) and e.run_id == fin.run_id]
    ids = [t for s in steps for t in s.token_ids]
    assert ids[CLOSE_AT] == close_id and close_id not in ids[:CLOSE_AT]
    # The test's own reading from the ids: up to the close, thinking; after it, the answer.
    assert [s.phase for s in steps] == ["thinking"] * (CLOSE_AT + 1) + ["answer"] * (16 - CLOSE_AT - 1)
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": CLOSE_AT + 1, "answer": 16 - CLOSE_AT - 1}
    assert st.ttfa_s == pytest.approx((steps[CLOSE_AT + 1].t_ns - session.timer.runs[fin.run_id].started.t_ns) / 1e9)
    assert st.ttfa_s > st.ttft_s and st.phase_itl("thinking").n == CLOSE_AT  # the first token is the prefill's
    assert "10 thinking, 6 answer tok (thinking 62" in row_line(session.rows()[-1])


def test_a_span_never_closed_is_all_thinking_and_said(thinker):
    engine, session, tok = thinker
    events: list = []
    session.listeners.append(events.append)
    fin = engine.run(RunRequest(prompt="Why?", max_new_tokens=8, ignore_eos=True))
    assert isinstance(fin, RunFinished)
    ids = [t for e in events if isinstance(e, Step) for t in e.token_ids]
    assert len(ids) == 8 and tok.convert_tokens_to_ids("</think>") not in ids  # the seeded weights' own picks
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": 8} and st.last_phase == "thinking"
    assert "never closed" in row_line(session.rows()[-1])


def test_a_raw_prompt_that_opens_no_span_is_all_answer(thinker):
    engine, session, _ = thinker
    fin = engine.run(RunRequest(prompt="Why?", max_new_tokens=4, ignore_eos=True, chat=False))
    assert session.timer.runs[fin.run_id].total.phase_tokens == {"answer": 4}


def test_a_thinking_budget_closes_the_span_at_the_budget_and_the_answer_follows(thinker):
    engine, session, tok = thinker
    close_id = tok.convert_tokens_to_ids("</think>")
    events: list = []
    session.listeners.append(events.append)
    assert engine.set_lever("think", 64)
    try:
        fin = engine.run(RunRequest(prompt="Why?", max_new_tokens=72, ignore_eos=True))
    finally:
        engine.set_lever("think", 0)
    ids = [t for e in events if isinstance(e, Step) and e.run_id == fin.run_id for t in e.token_ids]
    assert ids.index(close_id) == 63  # the span's 64th token, its close included
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": 64, "answer": 8} and st.levers.think == 64
    assert "think≤64" in row_line(session.rows()[-1])


def test_a_budget_is_refused_with_the_reason_where_it_cannot_hold(thinker, engine, collect):
    from monitors.events import LeverRefused

    reasons = []
    thinking_engine, session, _ = thinker
    session.listeners.append(lambda ev: reasons.append(ev.reason) if isinstance(ev, LeverRefused) else None)
    assert thinking_engine.set_lever("spec", "lookup")
    try:
        assert not thinking_engine.set_lever("think", 64)  # a speculative step could pass it
    finally:
        thinking_engine.set_lever("spec", "off")
    assert not engine.set_lever("think", 256)  # the default model has no think span
    refused = [e.reason for e in collect if isinstance(e, LeverRefused)]
    assert "speculative step" in reasons[-1] and refused == ["this model has no think span: its tokenizer has no <think> and </think> tokens"]
