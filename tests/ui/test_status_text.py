"""The status line's sentences, as the pure functions that build them."""

from monitors.events import EngineError, EngineReady, LeverChanged, Levers, Phase, RunFinished, RunStarted, Sampled, Step
from tests.helpers.synthetic import session_events
from tui_app.core.fmt import fit
from tui_app.core.session import Session
from tui_app.ui import status_text


def ready(**server) -> EngineReady:
    return EngineReady(
        model="m",
        source="s",
        device="cpu",
        dtype="float32",
        n_params=1,
        weight_bytes=1,
        n_layers=1,
        kv_heads=1,
        head_dim=1,
        kv_bytes_per_elem=4,
        context_len=8,
        load_s=1.25,
        threads=1,
        server=server or None,
    )


def test_each_event_leaves_the_state_it_says():
    after = status_text.after
    assert after(RunStarted(run_id=3, levers=Levers(), prompt_tokens=1, max_new_tokens=2, prompt_text="p"), False) == "run 3: generating"
    fin = RunFinished(
        run_id=3,
        n_tokens=2,
        stop_reason="eos",
        text="",
        peak_rss=0,
        baseline_rss=0,
        torch_peak=None,
        gpu_baseline=None,
        perplexity=None,
        first_diff=None,
        diff_note="",
    )
    assert after(fin, False) == "run 3 done (eos)" and after(fin, True) == "run 3 done (eos) · auto"
    assert after(LeverChanged(run_id=3, lever="quant", value="int8", levers=Levers(quant="int8")), False) == "run 3: generating"
    assert after(LeverChanged(run_id=None, lever="cache", value=False, levers=Levers(cache=False)), False) == "cache → off for the next run (r starts it)"
    assert after(Phase(name="compile", detail="batch 1", done=False), False) == "compile: batch 1…"
    assert after(Phase(name="compile", detail="batch 1", done=True, seconds=61.04), False) == "compile: batch 1 (61.0 s)"
    assert after(Phase(name="pause", detail="paused", done=False), False) == "paused"
    assert after(Phase(name="pause", detail="resumed", done=True, seconds=1), False) == "generating"
    assert after(ready(), False) == "m on cpu (float32) ready in 1.2 s"
    assert after(ready(url="http://h:1"), False) == "m on the cpu server at http://h:1"
    assert after(EngineError(message="boom", fatal=True), False) == status_text.FAILED
    assert after(EngineError(message="one run failed"), False) is None and after(Sampled(t_ns=1), False) is None
    assert status_text.subtitle(ready()) == "m · cpu · float32" and status_text.subtitle(ready(url="http://h:1")) == "m · cpu · http://h:1"


def test_a_phase_in_progress_shows_its_seconds_so_far():
    phase = Phase(name="compile", detail="x", done=False)
    assert status_text.with_clock("compile: x…", phase, since=100.0, now=163.4) == "compile: x… 63 s"
    assert status_text.with_clock("run 2: generating", phase, since=100.0, now=163.4) == "run 2: generating"  # the state moved on
    done = Phase(name="compile", detail="x", done=True, seconds=3)
    assert status_text.with_clock("compile: x (3.0 s)", done, since=None, now=163.4) == "compile: x (3.0 s)"


def test_the_status_items_put_the_levers_first_and_keep_tok_s_when_short():
    session = Session.from_events(session_events(runs=1, tokens=8))
    items = status_text.status_items(session, "run 1 done (max tokens)", "long", auto=True)
    texts = [i.variants[0] for i in items]
    assert texts[:6] == ["k:cache", "c:eager", "w:fp", "s:off", "b:1", "l:long"] and "auto" in texts
    rate = next(i for i, t in enumerate(texts) if t.endswith(" tok/s"))
    assert texts[-1].startswith("mem bw ") and any(t.startswith("TTFT ") for t in texts)  # the synthetic session measured its read rate
    shown = fit([(i.variants, i.priority) for i in items], 40, sep=" ")
    assert shown[rate] == texts[rate] and shown[0] == "k:cache" and shown[-1] is None  # too narrow: lower priorities leave, tok/s stays


def test_on_a_server_the_status_shows_its_engine_and_streams_not_the_engines_levers():
    session = Session()
    session.feed(ready(engine="vLLM", url="http://h:1", label="h:1"))
    session.feed(RunStarted(run_id=1, levers=Levers(batch=4, server="h:1"), prompt_tokens=1, max_new_tokens=2, prompt_text="p"))
    session.feed(
        Step(run_id=1, step=1, kind="prefill", token_ids=[], text="x", n_tokens=1, t_ns=1, dt_ns=1, forward_ns=0, kv_bytes=0, kv_alloc_bytes=0, seq_len=0)
    )
    texts = [i.variants[0] for i in status_text.status_items(session, "s", "short", auto=False)]
    assert texts[:2] == ["vLLM", "b:c4"] and not any(t.startswith(("k:", "w:")) for t in texts)


def test_a_watched_loop_without_a_cache_says_so_and_why_where_the_cache_lever_is():
    session = Session()
    session.feed(ready())
    note = "your loop re-reads the whole context each step"
    session.feed(RunStarted(run_id=1, levers=Levers(cache=False), prompt_tokens=4, max_new_tokens=0, prompt_text="p", preset="script", cache_note=note))
    texts = [i.variants for i in status_text.status_items(session, "s", "watch", auto=False)]
    assert texts[0] == (f"cache: off ({note})", "cache: off") and texts[1] == ("c:eager",)
    assert status_text.cache_off(session) == note
    session.feed(RunStarted(run_id=2, levers=Levers(cache=False), prompt_tokens=4, max_new_tokens=8, prompt_text="p"))  # the engine's k
    assert status_text.status_items(session, "s", "short", auto=False)[0].variants == ("k:no-cache",)
    assert status_text.cache_off(session) == "every step recomputes the whole context"


def test_a_thinking_run_shows_its_ttfa_and_thinking_share_beside_ttft():
    from dataclasses import replace

    events = [replace(e, phase="thinking" if e.step <= 3 else "answer") if isinstance(e, Step) else e for e in session_events(runs=1, tokens=8)]
    events = [replace(e, thinks=True) if isinstance(e, EngineReady) else e for e in events]
    session = Session.from_events(events)
    st = session.current.total
    texts = [i.variants[0] for i in status_text.status_items(session, "s", "long", auto=False)]
    assert f"TTFA {status_text.fmt.ms(st.ttfa_s, 0)}" in texts and "think 3 (38%)" in texts
    assert "T:off" in texts  # the thinking budget's lever, where the model has a think span
    session.feed(LeverChanged(run_id=None, lever="think", value=256, levers=Levers(think=256)))
    assert "T:≤256" in [i.variants[0] for i in status_text.status_items(session, "s", "long", auto=False)]
    session.feed(LeverChanged(run_id=None, lever="think", value=-1, levers=Levers(think=-1)))
    assert "T:none" in [i.variants[0] for i in status_text.status_items(session, "s", "long", auto=False)]
    plain = [i.variants[0] for i in status_text.status_items(Session.from_events(session_events(runs=1, tokens=8)), "s", "long", auto=False)]
    assert not any(t.startswith(("TTFA", "think", "T:")) for t in plain)  # a run of answer alone, a model that cannot think
