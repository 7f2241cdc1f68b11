"""What `e` writes: strict JSON (no bare NaN), every run, every number as the session folds it."""

import json

from monitors.events import Levers, RunStarted, Step
from tests.helpers.synthetic import session_events
from tui_app.core.export import export_session
from tui_app.core.session import Session


def _reject(constant):
    raise ValueError(f"bare {constant} in the export")


def test_export_is_strict_json_with_null_for_missing_numbers(tmp_path):
    events = session_events(runs=2, tokens=8)
    t = events[-1].t_ns
    # a run stopped after its prefill: no decode step, so ITL and tok/s have no value
    events += [
        RunStarted(run_id=3, levers=Levers(), prompt_tokens=5, max_new_tokens=8, prompt_text="p", t_ns=t + 1),
        Step(run_id=3, step=1, kind="prefill", token_ids=[1], text="a", n_tokens=1, t_ns=t + 2, dt_ns=1, forward_ns=1, kv_bytes=0, kv_alloc_bytes=0, seq_len=6),
    ]
    session = Session.from_events(events)
    path = tmp_path / "x.json"
    export_session(session, str(path))
    data = json.loads(path.read_text(), parse_constant=_reject)
    assert [r["run"] for r in data["runs"]] == [row.label for row in session.rows()]
    last = data["runs"][-1]
    assert last["itl_p50_s"] is None and last["decode_tok_s"] is None and last["ttft_s"] is not None
