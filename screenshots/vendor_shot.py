"""The panes on an AMD Instinct MI300X, made by make_screenshots.py: no AMD GPU runs here, so the
sampler reads the fixture tree laid out as amdgpu's sysfs (tests/fixtures/sysfs/mi300x/: its
figures are made up and hold still), while the default model generates on this machine's CPU."""

from __future__ import annotations

from pathlib import Path

from shots import HERE, to_png, until

from monitors.gpu_amd import AmdSysfsReader
from monitors.sampler import Sampler
from tui_app.commands.run import engine_source
from tui_app.engine.config import EngineConfig
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

MI300X = Path(HERE).parent / "tests" / "fixtures" / "sysfs" / "mi300x"


async def shoot_amd(size: tuple[int, int]) -> str:
    sampler = Sampler(hz=4, gpu=AmdSysfsReader(MI300X))
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=120, ignore_eos=True), sampler=sampler, fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.session.finished_ids) >= 1 and len(app.session.samples) > 20)
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"tokentop-mi300x-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)
