"""benchmarks/common/tmux.py: what the benchmarks and the terminal tests read off the real app's screen."""

import shutil
import time

import pytest

from benchmarks.common.deadline import GAP_S
from benchmarks.common.tmux import TmuxApp, runs_finished


def test_finished_runs_are_counted_by_their_number_not_by_one_status():
    """A small model's runs take a tenth of a second: the poll must not wait for one exact status."""
    assert runs_finished("│ 358  cache  43 │\n run 4 done (length) · auto   ? help") == 4
    assert runs_finished("run 361: generating") == 360
    assert runs_finished("loading the model… run 12 shown in no status") == 0


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_pause_of_the_looking_process_does_not_use_up_the_wait():
    """A VM paused, then resumed past a wait's deadline: the app was paused too, so the screen is
    looked at again before the wait fails, and a pause counts GAP_S at most."""
    app = TmuxApp("tt-wait-gap", ["--version"])
    try:
        app.wait_for(lambda s: "TOKENTOP-EXIT=0" in s, timeout=30)
        looks = []

        def paused_once(screen):
            looks.append(screen)
            if len(looks) == 1:
                time.sleep(GAP_S + 1.5)  # the whole deadline passes inside one look
                return False
            return True

        app.wait_for(paused_once, timeout=1.0)
        assert len(looks) == 2
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"the longest gap between two looks \d+\.\d s"):
            app.wait_for(lambda s: False, timeout=0.5)  # a screen that never shows it still fails
        assert time.perf_counter() - t0 < 0.5 + GAP_S
    finally:
        app.close(wait=False)
