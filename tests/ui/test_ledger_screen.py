"""`g` opens the lever ledger over the session's runs; it says what to run while there is nothing
to weigh, and each mix's verdict once there is."""

from monitors.events import Levers
from tests.helpers.synthetic import timed_run
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp
from tui_app.ui.screens.ledger import LedgerScreen


def shown(app) -> str:
    return "\n".join(line.text for line in app.screen.query_one("#ledger-body").render_lines(app.screen.region))


async def test_g_shows_each_mix_against_plain_and_closes():
    events = []
    for i, (lev, ms) in enumerate([(Levers(), 50), (Levers(quant="int8"), 20)] * 2 + [(Levers(quant="int4"), 80)] * 2, 1):
        events += timed_run(i, lev, ms)
    app = TokentopApp(ReplaySource(events, speed=0), None)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause(0.5)
        await pilot.press("g")
        assert isinstance(app.screen, LedgerScreen)
        text = shown(app)
        assert "pays here: 2.5× decode" in text and "does not pay here: 0.63× decode" in text, text
        assert "decode tok/s vs plain" in text and "2 vs 2" in text
        await pilot.press("g")
        assert not isinstance(app.screen, LedgerScreen)


async def test_with_no_plain_run_the_ledger_says_what_to_run():
    app = TokentopApp(ReplaySource(timed_run(1, Levers(quant="int8"), 20), speed=0), None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("g")
        assert "run plain" in shown(app)
