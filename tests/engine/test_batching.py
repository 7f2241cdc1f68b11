"""The engine's continuous batching on the real default model: distinct prompts of different
lengths arrive during the run, join the batched decode at token boundaries and leave when done;
each sequence's greedy tokens equal its prompt run alone, and the padded cache is measured beside
the formula over the rows' own tokens."""

from itertools import pairwise

import pytest

from monitors.events import Anatomy, LeverRefused, RunStarted, Step
from monitors.kvcache import kv_formula_bytes
from monitors.timing import RunTimer
from tui_app.commands.bench import apply_levers
from tui_app.engine import batching
from tui_app.engine.lever_rules import DISTINCT_COMPILE
from tui_app.requests import Profile, RunRequest, SetLever

N = 32
REQ = RunRequest(preset="short", max_new_tokens=N, ignore_eos=True)


@pytest.fixture
def batches(monkeypatch):
    """Every ContinuousBatch the engine makes, to read the sequences it served."""
    made = []
    init = batching.ContinuousBatch.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(batching.ContinuousBatch, "__init__", keep)
    return made


def alone(engine, events, ids, n) -> list[int]:
    events.clear()
    engine.run(RunRequest(prompt_ids=ids, max_new_tokens=n, ignore_eos=True))
    return [t for s in events if isinstance(s, Step) for t in s.token_ids]


@pytest.mark.slow
def test_distinct_prompts_arrive_join_and_leave_and_each_equals_its_run_alone(plain, collect, batches):
    assert plain.cfg.batch_prompts == "distinct"
    assert apply_levers(plain, {"batch": 4}) == ""
    collect.clear()
    fin = plain.run(REQ)
    steps = [e for e in collect if isinstance(e, Step)]
    mine = [t for s in steps for t in s.token_ids]
    (batch,) = batches
    served = [*batch.done, *batch.rows[1:]]
    # Arrivals over time, of different lengths, finishing at different steps, slots refilled.
    first_seen = {}
    for s in steps:
        for number, *_ in s.batch:
            first_seen.setdefault(number, s.step)
    assert len(first_seen) >= 5 and len(set(first_seen.values())) >= 4, first_seen
    assert len({seq.prompt_len for seq in served}) >= 3 and len({seq.max_new for seq in served}) >= 2
    assert len(batch.done) >= 2 and max(len(s.batch) for s in steps) == 4
    assert any(s.waiting for s in steps)  # arrivals queued while the batch was full
    # The batch's tokens: every row's, the arrivals' first included, as the runs table counts them.
    assert sum(s.batch_tokens for s in steps) == N + sum(seq.new for seq in served)
    timer = RunTimer()
    timer.started(next(e for e in collect if isinstance(e, RunStarted)))
    for s in steps:
        timer.step(s)
    decode = [s for s in steps if s.kind == "decode"]
    assert timer.runs[fin.run_id].total.decode_seq_tokens == sum(s.batch_tokens for s in decode) > 3 * len(decode)
    apply_levers(plain, {})
    assert mine == alone(plain, collect, plain.prompt_ids(REQ)[0], N) and fin.n_tokens == N
    for seq in served:
        assert seq.ids[seq.prompt_len :] == alone(plain, collect, seq.ids[: seq.prompt_len], seq.new), seq.number


@pytest.mark.slow
def test_the_padded_cache_is_measured_beside_the_formula_of_the_rows_own_tokens(plain, collect):
    assert apply_levers(plain, {"batch": 4}) == ""
    collect.clear()
    plain.run(REQ)
    r = plain.ready
    per_token = kv_formula_bytes(r.kv_bytes_per_elem, 1, 1, r.n_layers, r.kv_heads, r.head_dim)
    for s in (e for e in collect if isinstance(e, Step)):
        own = [prompt + new - 1 for _, prompt, new, _ in s.batch]
        assert s.seq_len == max(own), s.step  # no column every row pads
        assert s.kv_alloc_bytes == per_token * len(s.batch) * s.seq_len  # measured from the tensors
        assert s.kv_bytes == per_token * sum(own)


@pytest.mark.slow
def test_the_batch_switched_mid_run_grows_and_shrinks_and_row_0_stays_greedy(plain, collect):
    ref = alone(plain, collect, plain.prompt_ids(REQ)[0], N)
    sent = iter([[], [], [SetLever("batch", 4)], *[[]] * 18, [SetLever("batch", 2)], *[[]] * 40])
    collect.clear()
    plain.run(REQ, lambda: next(sent, []))
    steps = [e for e in collect if isinstance(e, Step)]
    assert [t for s in steps for t in s.token_ids] == ref
    sizes = [len(s.batch) for s in steps]
    assert 4 in sizes and sizes[-1] == 2 and sizes[0] == 0
    assert [s.kind for s in steps].count("reprefill") == 2


def test_compile_and_a_batch_of_distinct_prompts_refuse_each_other(plain, collect):
    assert apply_levers(plain, {"batch": 2}) == ""
    collect.clear()
    assert not plain.set_lever("compile", True)
    assert apply_levers(plain, {}) == "" and apply_levers(plain, {"compile": True}) == ""
    assert not plain.set_lever("batch", 2)
    assert [e.reason for e in collect if isinstance(e, LeverRefused)] == [DISTINCT_COMPILE, DISTINCT_COMPILE]


@pytest.mark.slow
def test_the_anatomy_of_a_batched_step_accounts_for_it_arrivals_prefills_included(plain, collect, tmp_path):
    """`p` on a batch of distinct prompts: the window's steps (arrivals prefilled in some) split by
    part, the parts summing to the step, the step the engine's own clock's for the same steps."""
    assert apply_levers(plain, {"batch": 4}) == ""
    collect.clear()
    plain.command(Profile(str(tmp_path / "b.json"), 8))
    plain.run(RunRequest(preset="short", max_new_tokens=16, ignore_eos=True))
    (ev,) = [e for e in collect if isinstance(e, Anatomy)]
    window = [e for e in collect if isinstance(e, Step) and e.kind == "decode"][:8]
    assert ev.steps == 8 and ev.parts["attention"] > 0 and ev.parts["mlp"] > 0
    assert sum(ev.parts.values()) == pytest.approx(ev.step_ms, rel=1e-6)
    assert ev.step_ms == pytest.approx(sum(s.compute_ns for s in window) / 8 / 1e6, rel=0.05)
    assert any(len(b.batch) > len(a.batch) for a, b in pairwise(window))  # an arrival inside the window
