"""What `e` writes: strict JSON (no bare NaN), every run, every number as the session folds it."""

import json

from monitors.events import Levers, RunStarted, Step
from tests.helpers.synthetic import session_events
from tui_app.commands.replay import fold
from tui_app.ui.app import export_session


def _reject(constant):
    raise ValueError(f"bare {constant} in the export")


def test_export_is_strict_json_with_null_for_missing_numbers(tmp_path):
    events = session_events(runs=2, tokens=8)
    t = events[-1].t_ns
    # a run stopped after its prefill: no decode step, so ITL and tok/s have no value
    events += [RunStarted(3, Levers(), 5, 8, "p", t_ns=t + 1), Step(3, 1, "prefill", [1], "a", 1, t + 2, 1, 1, 0, 0, 6)]
    session = fold(events)
    path = tmp_path / "x.json"
    export_session(session, str(path))
    data = json.loads(path.read_text(), parse_constant=_reject)
    assert [r["run"] for r in data["runs"]] == [row.label for row in session.rows()]
    last = data["runs"][-1]
    assert last["itl_p50_s"] is None and last["decode_tok_s"] is None and last["ttft_s"] is not None
