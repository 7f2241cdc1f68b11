"""What a thinking budget bought, in-process, on a scripted thinker (tests/helpers/tiny_models.py):
its greedy output after any chat prompt is a known think of 80 tokens, `</think>`, a known answer
and its end, and after `</think>` comes the answer whatever came before. So a budget of 64 cuts the
think and leaves the answer as it was, and what the ledger and the tour say it bought is known."""

from __future__ import annotations

import pytest

from monitors.events import Step
from tests.helpers.tiny_models import distinct_words, save_scripted_thinker
from tui_app.commands.demo import run_tour
from tui_app.core import ledger
from tui_app.core.session import Session
from tui_app.core.tour import default_tour, fitting
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.engine.quality import Quality
from tui_app.requests import RunRequest

ANSWER = " Rayleigh scattering makes it blue"
NEW = 160  # past the script's end: each run ends at the model's end of text


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scripted")
    script, closer = save_scripted_thinker(folder, distinct_words(80), ANSWER)
    session = Session()
    engine = Engine(EngineConfig(model=str(folder)), session.feed)
    engine.load()
    return engine, session, script, script.index(closer)


def run(engine, session, think: int):
    """A run to the end under a budget (0: none), and its new tokens as its steps carried them."""
    events: list = []
    session.listeners.append(events.append)
    assert not think or engine.set_lever("think", think)
    try:
        fin = engine.run(RunRequest(prompt="Why is the sky blue?", max_new_tokens=NEW))
    finally:
        engine.set_lever("think", 0)
        session.listeners.remove(events.append)
    return fin, [t for e in events if isinstance(e, Step) and e.run_id == fin.run_id for t in e.token_ids]


def test_a_budget_that_cuts_the_think_keeps_the_answer_and_the_ledger_says_what_it_bought(scripted):
    engine, session, script, close_at = scripted
    plain, plain_ids = run(engine, session, 0)
    cut, cut_ids = run(engine, session, 64)
    assert plain_ids == script and plain.diff_note == "reference"
    # The test's own reading: the think's first 63 tokens, the close as its 64th, then the script's answer.
    assert cut_ids == script[:63] + script[close_at:]
    assert cut.diff_note == "answer identical" and cut.first_diff is None
    (entry,) = [e for e in ledger.entries(session) if e.prompt_tokens == session.timer.runs[cut.run_id].started.prompt_tokens]
    a, b = (session.timer.runs[f.run_id].total for f in (cut, plain))
    assert (a.phase_tokens["thinking"], b.phase_tokens["thinking"]) == (64, 81)  # each think's close in it
    assert entry.levers == "cache think≤64" and entry.verdict == (
        f"think≤64 bought the answer at {a.ttfa_s / b.ttfa_s:.2f}× plain's TTFA, {a.e2e_s / b.e2e_s:.2f}× plain's time, "
        f"{len(cut_ids)} vs {len(plain_ids)} tokens (64 vs 81 thinking); answer identical"
    )


def test_a_budget_above_the_think_changes_nothing(scripted):
    engine, session, script, _ = scripted
    run(engine, session, 0)
    fin, ids = run(engine, session, 256)
    assert ids == script and fin.diff_note == "answer identical"


def test_no_thinking_closes_the_span_at_the_first_token_and_the_answer_holds(scripted):
    engine, session, script, close_at = scripted
    run(engine, session, 0)
    fin, ids = run(engine, session, -1)
    assert ids == script[close_at:] and fin.diff_note == "answer identical"
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": 1, "answer": len(script) - close_at - 1} and st.levers.label() == "cache no-think"
    (entry,) = [e for e in ledger.entries(session) if e.levers == "cache no-think"]
    assert entry.verdict.startswith("no-think bought the answer at") and entry.verdict.endswith("(1 vs 81 thinking); answer identical")


def test_answers_are_compared_after_each_runs_think():
    q = Quality(EngineConfig(), None, "cpu", 64)
    ref = [5, 6, 7, 9, 1, 2, 3]  # a think of three tokens, its close (9), an answer
    assert q.compare([4], ref, False, True, answer_at=4) == (None, "reference")
    assert q.compare([4], [5, 9, 1, 2, 3], False, False, answer_at=2, budgeted=True) == (None, "answer identical")
    assert q.compare([4], [5, 9, 1, 8, 3], False, False, answer_at=2, budgeted=True) == (3, "answer differs at token 1")
    assert q.compare([4], [5, 9, 1, 8], False, False, answer_at=2) == (1, "differs at token 1")  # no budget: the whole output
    q.compare([3], [5, 6], False, True, answer_at=None)  # plain's run ended thinking
    assert q.compare([3], [9, 1], False, False, answer_at=1, budgeted=True) == (None, "answer not compared: plain's run ended thinking")


def test_the_tours_thinking_scene_states_what_the_budget_bought(scripted):
    engine, session, _, _ = scripted
    steps = [s for s in default_tour(tokens=NEW, seconds=0) if s.thinking]
    said: list[str] = []
    log = run_tour(engine, session, steps, say=said.append)
    thinking, budget = (log.results[s.label] for s in steps)
    t, b = thinking.figures, budget.figures
    assert t is not None and b is not None and not budget.refused
    assert budget.effect() == (f"budget: TTFA {b.ttfa_s / t.ttfa_s:.2f}× thinking's ({b.ttfa_s * 1e3:.1f} ms vs {t.ttfa_s * 1e3:.1f} ms), " + budget.verdict)
    assert budget.verdict.startswith("think≤64 bought the answer at") and budget.verdict.endswith("(64 vs 81 thinking); answer identical")
    assert not any("left out" in line for line in said)


def test_a_model_without_a_think_span_leaves_the_thinking_scene_out_and_says_so():
    steps, left = fitting(default_tour(), thinks=False, moe=True)
    assert [s.label for s in default_tour() if s not in steps] == ["thinking", "budget"]
    assert left == "left out thinking, budget: the model has no think span"
    assert fitting(default_tour(), thinks=True, moe=True) == (default_tour(), "")
    steps, left = fitting(default_tour(), thinks=False)  # the default model: neither
    assert [s.label for s in default_tour() if s not in steps] == ["experts", "thinking", "budget"]
    assert left == "left out thinking, budget: the model has no think span; left out experts: the model is not an MoE whose routing is counted"
