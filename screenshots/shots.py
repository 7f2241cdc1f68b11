"""What every picture's maker shares: waiting on the app, and the SVG screenshot turned into a PNG."""

from __future__ import annotations

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


async def until(pilot, cond, timeout=180):
    for _ in range(int(timeout * 10)):
        if cond():
            return
        await pilot.pause(0.1)
    raise TimeoutError("the app did not get there in time")


def to_png(svg: str, size: tuple[int, int]) -> str:
    """The PNG beside a Textual SVG screenshot (11 pixels a column), the SVG removed."""
    png = svg.removesuffix(".svg") + ".png"
    subprocess.run(["rsvg-convert", "-w", str(size[0] * 11), svg, "-o", png], check=True)
    os.unlink(svg)
    return png
