"""The expert pane's picture (E), made by make_screenshots.py: no MoE checkpoint installs here, so it
shows a random-weight Qwen3-MoE of 16 layers × 64 experts, 4 a token (tests/helpers/tiny_models.py),
at batch 4 of distinct prompts, 96 tokens into the run; at 160×45 and folded into 80×24."""

from __future__ import annotations

import tempfile

from shots import HERE, to_png, until

from monitors.events import Levers
from monitors.sampler import Sampler
from tests.helpers.tiny_models import save_moe
from tui_app.commands.run import engine_source
from tui_app.engine.config import EngineConfig
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

SIZES = {"hidden_size": 128, "num_hidden_layers": 16, "num_experts": 64, "num_experts_per_tok": 4, "head_dim": 32}


async def shoot_experts(size: tuple[int, int]) -> str:
    with tempfile.TemporaryDirectory() as folder:
        save_moe("qwen3moe", folder, **SIZES)
        req = RunRequest(preset="short", max_new_tokens=160, ignore_eos=True)
        app = TokentopApp(engine_source(EngineConfig(model=folder, levers=Levers(batch=4))), req, sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.session.token_count >= 96)
            await pilot.press("space", "E")  # paused: the pane holds one moment of the run
            await pilot.pause(1.0)
            svg = app.save_screenshot(filename=f"tokentop-experts-{size[0]}x{size[1]}.svg", path=HERE)
            await pilot.press("escape", "q")
    return to_png(svg, size)
