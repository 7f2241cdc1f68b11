"""`tokentop serve` in a real browser: Debian's headless Chromium loads the page, the app's first frame
arrives, `?` opens the help screen, and the page raises no error of its own."""

import pytest

from tests.helpers import browser

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser.unavailable() is not None, reason=str(browser.unavailable()))]


def test_serve_in_chromium_draws_the_app_and_answers_a_key(tmp_path):
    with browser.serving(str(tmp_path / "serve.log"), "--no-record", "--max-new-tokens", "8") as url, browser.chromium() as chrome:
        visit = browser.browse_app(chrome, url, str(tmp_path / "first.png"), str(tmp_path / "help.png"))
    assert visit.page_errors == [] and browser.own_errors(visit) == [], visit
    # textual-serve's page asks for a web font; blocked here (no network), the terminal's own font stands in.
    assert all("fonts.googleapis.com" in u for u in visit.blocked), visit.blocked
    first, help_ = (tmp_path / "first.png").read_bytes(), (tmp_path / "help.png").read_bytes()
    assert first[:8] == help_[:8] == b"\x89PNG\r\n\x1a\n" and first != help_
