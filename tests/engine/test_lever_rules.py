"""The levers' rules among themselves (engine/lever_rules.py): checked in the engine's order from
the defaults, a refused lever left out of what the later ones are checked against, as the loaded
engine applies a command line's levers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monitors.events import Levers
from tui_app.engine.lever_rules import ORDER, refusal, refused_at_start


def refused(temperature: float = 0.0, batch_prompts: str = "replicated", **asked) -> list[tuple[str, object]]:
    return [(name, value) for name, value, _ in refused_at_start(Levers(**asked), temperature, batch_prompts)]


def test_what_the_levers_allow_together_is_refused_nothing():
    assert refused() == []
    assert refused(compile=True, quant="int8", batch=4) == []
    assert refused(spec="lookup", quant="int4", think=256) == [("think", 256)]  # a budget and speculation: one of them
    assert refused(spec="draft") == [] and refused(cache=False, quant="int8") == []


@pytest.mark.parametrize(
    "asked,expected",
    [
        ({"compile": True, "spec": "lookup"}, [("spec", "lookup")]),  # compile comes first in ORDER
        ({"compile": True, "cache": False}, [("cache", False)]),
        ({"spec": "draft", "batch": 2}, [("batch", 2)]),
        ({"cache": False, "spec": "lookup"}, [("spec", "lookup")]),
        # the cache refused, compile stays on: speculation is then refused for compile's sake
        ({"compile": True, "cache": False, "spec": "lookup"}, [("cache", False), ("spec", "lookup")]),
    ],
)
def test_a_lever_is_checked_against_those_applied_before_it(asked, expected):
    assert refused(**asked) == expected


def test_the_run_options_decide_too():
    assert refused(temperature=0.7, spec="lookup") == [("spec", "lookup")]
    assert refused(batch_prompts="distinct", compile=True, batch=2) == [("batch", 2)]
    assert refused(batch_prompts="distinct", batch=2, think=256) == [("think", 256)]


def test_every_lever_has_its_rules_and_an_unknown_one_is_refused():
    assert set(ORDER) == {f for f in Levers.__dataclass_fields__ if f != "server"}
    assert refusal("speed", 2, Levers(), 0.0, "replicated") == "unknown lever 'speed'"
    assert "must be one of" in (refusal("batch", 3, Levers(), 0.0, "replicated") or "")


def test_the_command_line_refuses_before_any_model_loads():
    """A model that does not exist: the levers' refusal comes first, as no model could run them."""
    cmd = [sys.executable, "-m", "tui_app", "run", "--no-tui", "--no-record", "--model", "no-such-model", "--compile", "--spec", "lookup"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--spec lookup refused: verify steps are multi-token" in r.stderr
    code = "import sys, tui_app.engine.lever_rules; print(*sys.modules)"
    assert "torch" not in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
