"""Regenerate screenshots/*.png from the real app on the real model: Textual's SVG screenshot,
then rsvg-convert (Debian's librsvg2-bin). `make screenshots` runs this.

The session shown: a run of the short prompt, int8 switched on mid-run, then a run with prompt
lookup on the long (summarize-this) prompt, so every pane has something to show. The attach
picture: the real llama.cpp server (xllamacpp) on the bundled GGUF, one stream, then four.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from monitors.sampler import Sampler  # noqa: E402
from tui_app.app import TokentopApp  # noqa: E402
from tui_app.engine.config import EngineConfig, RunRequest  # noqa: E402
from tests.llama_server import LlamaServer  # noqa: E402
from tui_app.attach.client import AttachConfig  # noqa: E402
from tui_app.sources import AttachSource, LiveSource  # noqa: E402

SIZES = [(160, 45), (80, 24)]


async def until(pilot, cond, timeout=180):
    for _ in range(int(timeout * 10)):
        if cond():
            return
        await pilot.pause(0.1)
    raise TimeoutError("the app did not get there in time")


async def shoot(size: tuple[int, int]) -> str:
    app = TokentopApp(LiveSource(EngineConfig()), RunRequest(max_new_tokens=120), sampler=Sampler(hz=4), fps=8)
    steps = lambda: sum(1 for p in app.session.latency)  # noqa: E731
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: steps() > 40)
        await pilot.press("w")
        await until(pilot, lambda: len(app.session.finished_ids) >= 1)
        await pilot.press("w", "w", "s", "l")
        await until(pilot, lambda: len(app.session.finished_ids) >= 2)
        await pilot.pause(1.0)
        name = f"tokentop-{size[0]}x{size[1]}"
        svg = app.save_screenshot(filename=name + ".svg", path=HERE)
        await pilot.press("q")
    png = os.path.join(HERE, name + ".png")
    subprocess.run(["rsvg-convert", "-w", str(size[0] * 11), svg, "-o", png], check=True)
    os.unlink(svg)
    return png


async def shoot_attach(size: tuple[int, int]) -> str:
    server = LlamaServer()
    try:
        source = AttachSource([AttachConfig(url=server.url, metrics_hz=4, label="llama.cpp")])
        app = TokentopApp(source, RunRequest(max_new_tokens=120), sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.session.finished_ids) >= 1)
            await pilot.press("b", "b", "r")
            await until(pilot, lambda: len(app.session.finished_ids) >= 2)
            await pilot.pause(2.0)
            name = f"tokentop-attach-{size[0]}x{size[1]}"
            svg = app.save_screenshot(filename=name + ".svg", path=HERE)
            await pilot.press("q")
    finally:
        server.close()
    png = os.path.join(HERE, name + ".png")
    subprocess.run(["rsvg-convert", "-w", str(size[0] * 11), svg, "-o", png], check=True)
    os.unlink(svg)
    return png


def main() -> int:
    if shutil.which("rsvg-convert") is None:
        print("rsvg-convert is missing: apt-get install librsvg2-bin", file=sys.stderr)
        return 2
    for size in SIZES:
        print("wrote", asyncio.run(shoot(size)))
    print("wrote", asyncio.run(shoot_attach((160, 45))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
