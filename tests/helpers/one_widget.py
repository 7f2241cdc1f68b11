"""A widget alone in a Textual app, for the tests that draw one pane and read what it shows."""

from __future__ import annotations

from textual.app import App


class One(App):
    def __init__(self, widget):
        super().__init__()
        self.widget = widget

    def compose(self):
        yield self.widget


async def subtitle(chart, size: tuple[int, int] = (160, 30)) -> str:
    """The border subtitle a chart draws once it has its size."""
    async with One(chart).run_test(size=size) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        return str(chart.border_subtitle)
