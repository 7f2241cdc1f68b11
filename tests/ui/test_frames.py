"""The frame pacing and the damage it draws: what a frame repaints turns the last frame into the
new one; a terminal that does not answer in time gets no new frames until it has caught up."""

import itertools
import random
import re
import time

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from tests.helpers.synthetic import session_events
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp
from tui_app.ui.damage import cells, damage
from tui_app.ui.frames import LOST_S, parse_fps

STYLES = [None, Style(color="red"), Style(color="cyan", bold=True), Style(bgcolor="blue")]
CHARS = "ab ⠁⠂⣿│─全é"  # braille, box drawing, a wide character


def random_strip(rng: random.Random, width: int) -> Strip:
    segs, filled = [], 0
    while filled < width:
        text = "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 6)))
        cells_left = width - filled
        kept = ""
        for ch in text:
            if len(cells(Strip([Segment(kept + ch)]))) > cells_left:
                break
            kept += ch
        if not kept:
            kept = " " * cells_left
        segs.append(Segment(kept, rng.choice(STYLES)))
        filled += len(cells(Strip([segs[-1]])))
    return Strip(segs)


def test_repainting_the_damage_turns_the_old_frame_into_the_new():
    """A terminal that had the old frame and gets only the damaged cells shows the new frame."""
    rng = random.Random(3)
    width, height = 30, 8
    for _ in range(300):
        old = [random_strip(rng, width) for _ in range(height)]
        new = [s if rng.random() < 0.6 else random_strip(rng, width) for s in old]
        screen = [cells(s) for s in old]
        regions = damage(old, new)
        for r in regions:
            assert r.height == 1
            fresh = cells(new[r.y])
            screen[r.y][r.x : r.x + r.width] = fresh[r.x : r.x + r.width]
        assert screen == [cells(s) for s in new]
        unchanged = {y for y in range(height) if old[y] == new[y]}
        assert not {r.y for r in regions} & unchanged, "an unchanged line is not repainted"


@pytest.mark.serial
async def test_frames_wait_for_a_terminal_that_is_behind_and_say_so():
    """A question the terminal leaves unanswered past the link's round trip and a frame: frames are
    skipped (the events still go into the session) and the status line says so; its late answer
    slows the automatic clock to the terminal's pace; a quick answer brings it back to 4 fps."""
    app = TokentopApp(ReplaySource(session_events(runs=3), speed=1), None, fps="auto")
    async with app.run_test(size=(120, 40)) as pilot:
        pacer = app.pacer
        assert (pacer.fps, pacer.auto) == (4.0, True) and parse_fps("6") == (6.0, False)
        await pilot.pause(0.5)
        assert not pacer.behind(time.monotonic()), "no answer yet: the clock alone draws"
        pacer.asked.append(time.monotonic() - 0.02)
        pacer.answered()  # the terminal answers: a link of 20 ms
        drawn, tokens = len(pacer.drawn), app.session.token_count
        pacer.asked.append(time.monotonic())  # a question it leaves unanswered: its output backs up
        await pilot.pause(4.5)
        assert len(pacer.skips) >= 10 and len(pacer.drawn) <= drawn + 2, (len(pacer.skips), len(pacer.drawn) - drawn)
        assert app.session.token_count > tokens, "the events go on into the session"
        status = str(app.status.render())
        assert re.search(r"slow terminal: [\d.]+ fps", status), status
        pacer.answered()  # 4.5 s late: the frame before it queued that long
        await pilot.pause(0.1)  # the frame held back is drawn now, and its rate counts itself
        rate = re.search(r"slow terminal: ([\d.]+) fps", str(app.status.render()))
        assert rate is None or float(rate.group(1)) > 0, "a frame that is drawn says so in its own rate"
        assert not pacer.slow(), "one late answer is a moment's queue"
        pacer.asked.append(time.monotonic() - 3.0)
        pacer.answered()  # and the next one too: the terminal cannot keep up
        assert pacer.slow() and pacer.interval == 2.0, pacer.interval
        pacer.asked.append(time.monotonic())
        pacer.answered()  # a quick answer: the queue is gone
        assert not pacer.slow() and pacer.interval == 0.25
        drawn = len(pacer.drawn)
        await pilot.pause(1.5)
        assert len(pacer.drawn) >= drawn + 4, "frames come at 4 a second again"
        pacer.asked.append(time.monotonic() - LOST_S - 1)
        assert not pacer.behind(time.monotonic()), "a question unanswered this long is taken as lost"
        pacer.asked.clear()
        await pilot.pause(4.5)
        assert "slow terminal" not in str(app.status.render())


async def test_every_frame_comes_when_the_ui_is_held_up_between_two_reads_of_the_clock(monkeypatch):
    """A UI thread held up (preempted on a loaded machine, a garbage collection) between two reads
    of the clock: the frames come all the same. Textual's one-shot timer, which the frame clock was,
    reads the clock twice before it sleeps and skips a tick it finds missed; a one-shot has no next,
    so it never fired, and the app stayed at its first frame for good, its status line never drawn
    (a parallel tier's app in tmux, twice on record). Here each read of Textual's clock comes 5 ms
    after the one before, as a thread held up between any two of them sees it."""
    from textual import _time

    real, reads = _time.get_time, itertools.count()
    monkeypatch.setattr(_time, "get_time", lambda: real() + 0.005 * next(reads))
    app = TokentopApp(ReplaySource(session_events(runs=2), speed=1), None, fps="auto")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.0)
        assert len(app.pacer.drawn) >= 3, "the frame clock fired at most twice in a second"
        assert app.session.token_count > 0 and "replay" in str(app.status.render())
