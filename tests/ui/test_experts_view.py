"""`E`: the expert pane, on the events of a real engine's runs of a small random-weight Qwen3-MoE
(tests/helpers/tiny_models.py), replayed; and its folding of a large MoE's map into a small terminal."""

from __future__ import annotations

import pytest

from monitors.events import ExpertLoad, RunFinished
from monitors.routing import imbalance
from tests.helpers.tiny_models import save_moe
from tests.ui.test_app import until
from tui_app.core.sources import ReplaySource
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.screens.experts import ExpertsScreen, heatmap, render


@pytest.fixture(scope="module")
def moe_events(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("moe")
    save_moe("qwen3moe", folder)
    events: list = []
    engine = Engine(EngineConfig(model=str(folder)), events.append)
    engine.load()
    engine.run(RunRequest(preset="short", max_new_tokens=24, ignore_eos=True))
    return events


def screen_text(app) -> str:
    return str(render(app.session, 156, 40, app.screen.window))


def test_the_loads_sum_to_the_runs_counts(moe_events):
    loads = [e for e in moe_events if isinstance(e, ExpertLoad)]
    (done,) = [e for e in moe_events if isinstance(e, RunFinished)]
    summed = [[sum(ev.counts[li][e] for ev in loads) for e in range(8)] for li in range(3)]
    assert summed == done.expert_counts and sum(ev.steps for ev in loads) == 24


async def test_E_draws_each_layers_load_and_w_its_last_steps(moe_events):
    (done,) = [e for e in moe_events if isinstance(e, RunFinished)]
    app = TokentopApp(ReplaySource(moe_events, speed=0), None)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await pilot.press("E")
        assert isinstance(app.screen, ExpertsScreen)
        text = screen_text(app)
        assert "3 MoE layers × 8 routed experts, 2 a token" in text and "over 24 steps" in text
        for li, layer in enumerate(done.expert_counts):  # each row: its layer's own max ÷ mean
            row = next(line for line in text.splitlines() if line.startswith(f"L{li} "))
            assert f"{imbalance(layer):.2f}× max/mean" in row
        assert "hottest: L" in text and "the last step read" in text
        assert all(len(line) <= 156 for line in text.splitlines() if line.startswith("L"))  # a row never wraps
        await pilot.press("w")
        assert "run 1, its last 24 steps" in screen_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, ExpertsScreen)


async def test_a_dense_model_says_why_there_is_no_pane():
    from tests.helpers.synthetic import session_events

    app = TokentopApp(ReplaySource(session_events(runs=1), speed=0), None)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await pilot.press("E")
        assert "no expert pane: the model is not a mixture of experts" in screen_text(app)


@pytest.mark.parametrize("ascii_only", [False, True])
def test_a_large_moe_folds_into_80_by_24(ascii_only):
    """48 layers × 128 experts (Qwen3-235B's shape) in an 80×24 terminal: layers and experts in
    groups, each line inside the width, the heat in ASCII where asked."""
    counts = [[(li * 7 + e * 13) % 29 for e in range(128)] for li in range(48)]
    lines = heatmap(counts, 78, 18, ascii_only)
    assert len(lines) <= 18 and all(len(line.plain) <= 78 for line in lines)
    assert lines[0].plain.startswith("L0–2") and lines[-1].plain.split()[0].endswith("47")
    heat = "".join(line.plain[7 : line.plain.index("  ", 7)] for line in lines)
    assert set(heat) <= set(" .:=*#" if ascii_only else " ·░▒▓█") and len(set(heat)) > 2


def test_an_attached_server_is_said_to_expose_no_load_not_to_be_dense():
    from dataclasses import replace

    from monitors.events import EngineReady
    from tests.helpers.synthetic import session_events
    from tui_app.core.session import Session

    session = Session()
    for ev in session_events(runs=1):
        session.feed(replace(ev, server={"engine": "vLLM", "url": "http://127.0.0.1:8000"}) if isinstance(ev, EngineReady) else ev)
    assert "no expert pane: vLLM exposes no expert load that tokentop reads" in str(render(session, 120, 30, "run"))
