"""Resource bounds under abuse: 10,000 runs in one session (memory bounded by the ring buffers,
the runs table scrolling over the newest, every run recorded), a prompt of 100,000 tokens against
a server with a 2,048-token context (the server's error, in one line)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from itertools import islice
from pathlib import Path

import psutil
import pytest

from monitors.events import RunStarted
from monitors.leaks import fit_slope, t_quantile_975
from monitors.record import Recorder
from tests.helpers.llama_server import LlamaServer
from tests.helpers.synthetic import session_events
from tests.ui.test_app import APP_SIZE, finished, notes, until
from tui_app.attach.client import AttachConfig
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.runs_table import RunsTable
from tui_app.ui.widgets.token_stream import MAX_CHUNKS

# serial: the 10,000 runs' test holds its own process's RSS trend, which another test's allocations
# in the same worker process would move.
pytestmark = [pytest.mark.chaos, pytest.mark.serial]
MIB = 2**20


class ManyRuns:
    """A source of `runs` short runs (tests/synthetic.py's, renumbered and moved on in time),
    `per_frame` of them at each drain, made as they are drained: the source holds none of them, so
    what grows is the app's alone."""

    live = False
    pid = None
    can_pause = False
    restartable = False
    kind = "engine"

    def __init__(self, runs: int, per_frame: int = 200, tokens: int = 8):
        events = session_events(runs=1, tokens=tokens)
        first = next(i for i, ev in enumerate(events) if isinstance(ev, RunStarted))
        self.header, self.run = events[:first], events[first:]
        self.span = self.run[-1].t_ns - self.run[0].t_ns + 300_000_000
        self.runs, self.per_frame = runs, per_frame
        self.done = False
        self._events = iter(())

    def _all(self):
        yield from self.header
        for k in range(1, self.runs + 1):
            for ev in self.run:
                moved = {"t_ns": ev.t_ns + (k - 1) * self.span}
                yield replace(ev, run_id=k, **moved) if hasattr(ev, "run_id") else replace(ev, **moved)

    def start(self) -> None:
        self._events = self._all()

    def drain(self) -> list:
        out = list(islice(self._events, self.per_frame * len(self.run)))
        self.done = not out
        return out

    def death(self) -> None:
        return None

    def send(self, *cmd) -> None:
        pass

    def restart(self, levers, first_run_id: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def fast_folder(tmp_path):
    """A folder in memory where there is one: 10,000 runs are 10,000 fsyncs, which a disk under
    CI's other jobs makes a minute."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="tokentop-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def test_10000_runs_in_one_session_hold_bounded_memory_and_the_table_scrolls(fast_folder):
    rec = fast_folder / "s.jsonl"
    source = ManyRuns(10_000)
    app = TokentopApp(source, None, recorder=Recorder(rec), fps=30)
    me = psutil.Process()
    rss: list[float] = []  # MiB every 1,000 runs from run 2,000 (ring buffers full, first-use growth done)
    at = 2000
    async with app.run_test(size=APP_SIZE) as pilot:
        while not source.done:
            await pilot.pause(0.02)
            if finished(app) and app.session.finished_ids[-1] >= at:
                rss.append(me.memory_info().rss / MIB)
                at += 1000
        session = app.session
        assert session.finished_ids[-1] == 10_000
        assert len(session.timer.runs) <= 500 and len(session.finished_ids) == 1000
        assert len(session.latency) == session.history and len(app.tokens.chunks) <= MAX_CHUNKS
        table = app.query_one(RunsTable)
        table.dirty = True
        table.redraw(force=True)
        shown = [strip.text.split()[0] for strip in table._strips[1:] if strip.text.strip()]
        assert shown[-1] == "10000" and table.border_title == "runs"
        table._scroll(10_000)  # the mouse wheel, as far back as it goes: the newest 200 runs
        shown = [strip.text.split()[0] for strip in table._strips[1:] if strip.text.strip()]
        assert shown[0] == "9801" and "newer below" in table.border_title
        await pilot.press("q")
    slope, se = fit_slope(rss)  # the leak detector's own trend, MiB per 1,000 runs
    high = slope + t_quantile_975(len(rss) - 2) * se
    assert high < 1.0, f"UI RSS every 1,000 runs (MiB): {[round(x, 1) for x in rss]}; slope {slope:.2f} MiB per 1,000 runs, 95% up to {high:.2f}"
    finished_lines = len(re.findall(rb'^\{"type":"RunFinished"', rec.read_bytes(), re.M))
    assert finished_lines == 10_000  # every run recorded


@pytest.fixture(scope="module")
def prompt_of_100k_tokens(tmp_path_factory):
    """100,000 words of the default model's vocabulary, each one token after a space."""
    rng = random.Random(1)
    words = ["river", "mountain", "valley", "ocean", "forest", "desert", "city", "bridge", "road", "tower", "castle", "garden"]
    path = tmp_path_factory.mktemp("prompt") / "long.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(100_000)))
    return path


@pytest.fixture(scope="module")
def small_context():
    server = LlamaServer("--ctx", "2048")
    yield server
    server.close()


def test_a_100k_token_prompt_against_a_2048_context_is_the_servers_error_in_one_line(small_context, prompt_of_100k_tokens):
    argv = ["attach", small_context.url, "--no-tui", "--prompt-file", str(prompt_of_100k_tokens), "--max-new-tokens", "8", "--no-record"]
    out = subprocess.run([sys.executable, "-m", "tui_app", *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    (line,) = out.stderr.splitlines()
    said = r"answered 400 to POST /v1/chat/completions: request \(1000\d\d tokens\) exceeds the available context size \(\d+ tokens\)"
    assert re.match(rf"tokentop: 127\.0\.0\.1:{small_context.port} {said}", line), line
    assert "ended: error" in out.stdout


async def test_a_100k_token_prompt_in_the_tui_ends_the_run_with_that_line_and_the_session_goes_on(small_context, prompt_of_100k_tokens):
    request = RunRequest(preset="file", prompt_file=str(prompt_of_100k_tokens), max_new_tokens=8)
    app = TokentopApp(AttachSource([AttachConfig(url=small_context.url)]), request, prompt_file=str(prompt_of_100k_tokens), fps=8)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=120, what="the run refused")
        said = [n for n in app.told if "exceeds the available context size" in n]
        assert len(said) == 1 and "\n" not in said[0]
        assert app.session.timer.runs[1].finished.stop_reason == "error" and app.session.fatal is None
        await pilot.press("l")  # the session goes on: a short prompt runs
        await pilot.press("r")
        await until(pilot, lambda: finished(app) >= 2, timeout=60, what="a run on a short prompt")
        assert app.session.timer.runs[2].finished.stop_reason in ("max tokens", "eos")
        assert not [n for n in notes(app) if "Traceback" in n]
        await pilot.press("q")
