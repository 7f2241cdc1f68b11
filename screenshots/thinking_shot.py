"""A reasoning model's run, made by make_screenshots.py: no thinking checkpoint installs here, so it
shows the scripted thinker of the tests (tests/helpers/tiny_models.py: a small Qwen3 whose greedy
output is a known think of 80 words, `</think>`, a known answer), run once thinking freely and once
under a budget of 64 (T), the tokens coloured by phase (o four times) and each think folded (f)."""

from __future__ import annotations

import tempfile

from shots import HERE, to_png, until

from monitors.sampler import Sampler
from tests.helpers.tiny_models import distinct_words, save_scripted_thinker
from tui_app.commands.run import engine_source
from tui_app.engine.config import EngineConfig
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

ANSWER = " Blue light scatters most in air"


async def shoot_thinking(size: tuple[int, int]) -> str:
    with tempfile.TemporaryDirectory() as folder:
        save_scripted_thinker(folder, distinct_words(80), ANSWER)
        app = TokentopApp(engine_source(EngineConfig(model=folder)), RunRequest(preset="short", max_new_tokens=160), sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.session.finished_ids) >= 1)
            await pilot.press("T", "r")
            await until(pilot, lambda: len(app.session.finished_ids) >= 2)
            await pilot.press("o", "o", "o", "o", "f")
            await pilot.pause(1.0)
            svg = app.save_screenshot(filename=f"tokentop-thinking-{size[0]}x{size[1]}.svg", path=HERE)
            await pilot.press("q")
    return to_png(svg, size)
