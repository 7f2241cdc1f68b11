"""The TUI with Textual's pilot: every key changes the state and the panes show it (live engine, real model),
and snapshots of the main layouts on deterministic data."""

import os
import re
import signal
from pathlib import Path

import pytest
from textual.css.query import NoMatches

from benchmarks.common.deadline import Deadline
from monitors.events import RunFinished
from monitors.sampler import Sampler
from tests.helpers.synthetic import session_events
from tui_app.commands.run import engine_source
from tui_app.core import readings
from tui_app.core.sources import ReplaySource
from tui_app.engine.generation import EngineConfig
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.screens.anatomy import AnatomyScreen
from tui_app.ui.screens.help import HelpScreen
from tui_app.ui.screens.prompt import PromptScreen
from tui_app.ui.widgets.token_stream import TokenStream

APP_SIZE = (160, 45)


async def until(pilot, cond, timeout=90.0, what=""):
    """The time the test ran, not the wall's (benchmarks/common/deadline.py): a VM paused past a
    wall-clock deadline failed the wait on what it saw before the pause; the longest gap says which."""
    deadline = Deadline(timeout)
    while not cond():
        if deadline.passed():
            raise AssertionError(f"timed out waiting for {what or cond} in {deadline}; the app showed {showed(pilot.app)}")
        await pilot.pause(0.1)


def showed(app) -> str:
    """Its status line and last notes: a wait that fails says whether the app was stuck or was told why."""
    try:
        status = status_text(app)
    except NoMatches:
        status = "(no status line)"
    return f"the status {status!r}, the notes {notes(app)[-5:]}"


def live_app(tmp_path, max_new=40):
    return TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=max_new), sampler=Sampler(hz=4), fps=8, out_dir=str(tmp_path))


def status_text(app) -> str:
    return str(app.query_one("#status").render())


def finished(app):
    return len(app.session.finished_ids)


def notes(app):
    """What the app told the user (refusals, errors, lever switches)."""
    return [text for _, text in app.session.messages] + list(app.told)


async def test_every_key_on_the_live_engine(tmp_path):
    app = live_app(tmp_path)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, what="the first run")
        assert "cache" in status_text(app) and "tok/s" in status_text(app)
        assert "run 1" in "".join(t for t, *_ in app.query_one(TokenStream).chunks)
        assert app.session.samples, "the sampler feeds the memory and utilization charts"

        await pilot.press("k")
        await until(pilot, lambda: not app.session.levers.cache, what="cache off")
        assert "k:no-cache" in status_text(app)
        await pilot.press("c")  # compile needs the cache: refused, with the reason, and the session goes on
        await until(pilot, lambda: any("static" in n for n in notes(app)), what="compile refused")
        await pilot.press("k")
        await until(pilot, lambda: app.session.levers.cache, what="cache on")

        await pilot.press("w")
        await until(pilot, lambda: app.session.levers.quant == "int8", what="int8")
        assert "int8" in status_text(app)
        await pilot.press("s")
        await until(pilot, lambda: app.session.levers.spec == "lookup", what="lookup")
        await pilot.press("b")  # batch > 1 with speculation: refused
        await until(pilot, lambda: any("batch" in n and "turn speculation off" in n for n in notes(app)), what="batch refused")
        await pilot.press("s", "s")
        await until(pilot, lambda: app.session.levers.spec == "off", what="spec off")
        await pilot.press("b")
        await until(pilot, lambda: app.session.levers.batch == 2, what="batch 2")
        await pilot.press("w", "w")
        await until(pilot, lambda: app.session.levers.quant == "off", what="quant off")

        n = finished(app)
        await pilot.press("r")
        await until(pilot, lambda: finished(app) > n, what="rerun")
        rows = app.session.rows()
        assert rows[-1].stats.levers.batch == 2

        n = len(app.session.timer.runs)
        await pilot.press("l", "r")  # idle: the preset, like a lever, applies to the next run
        await until(pilot, lambda: len(app.session.timer.runs) > n, what="long preset run")
        assert app.session.current.started.preset == "long" and app.session.current.started.prompt_tokens > 300

        await pilot.press("space")
        # The engine's own word that it holds: the status says "paused" at the key, while steps made
        # before the engine read it may still be on their way (a batch-2 step is two tokens).
        held = lambda: app.session.phase is not None and app.session.phase.name == "pause" and not app.session.phase.done  # noqa: E731
        await until(pilot, held, what="paused")
        assert app.state == "paused"
        tokens_then = app.session.token_count
        await pilot.pause(1.0)
        assert app.session.token_count - tokens_then <= 1
        await pilot.press("space")
        await until(pilot, lambda: app.session.token_count > tokens_then + 2, what="resumed")

        await pilot.press("n")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"Say hi.", "enter")
        await until(pilot, lambda: app.session.current and app.session.current.started.prompt_text == "Say hi.", what="custom prompt")

        await pilot.press("a")
        assert app.auto
        n = finished(app)
        await until(pilot, lambda: finished(app) >= n + 2, timeout=120, what="auto-repeat")
        await pilot.press("a")

        await pilot.press("e")
        await until(pilot, lambda: list(Path(tmp_path).glob("tokentop-*-export.json")), what="export")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: list(Path(tmp_path).glob("tokentop-*-screenshot.svg")), what="screenshot")

        await pilot.press("o", "o", "o")  # by confidence: the engine measures each token's probability from now
        n = finished(app)
        await pilot.press("r")
        await until(pilot, lambda: finished(app) > n, what="a run measured for confidence")
        assert any(chunk[4] >= 0 for chunk in app.query_one(TokenStream).chunks), "the run's tokens coloured by confidence (their sureness)"
        await pilot.press("o")

        await pilot.press("p")  # the anatomy of the next decode steps opens once they are profiled
        await until(pilot, lambda: isinstance(app.screen, AnatomyScreen), timeout=60, what="the anatomy")
        await until(pilot, lambda: str(app.screen.body.render()), what="the anatomy drawn")  # at its mount, after the push
        shown = str(app.screen.body.render())
        assert "MLP" in shown and "framework" in shown and app.session.anatomy.trace in shown, shown
        await pilot.press("escape")
        assert not isinstance(app.screen, AnatomyScreen)

        await pilot.press("H")  # the allocator's history: recorded on CUDA, refused with the reason elsewhere
        if app.session.ready.device.startswith("cuda"):
            await until(pilot, lambda: app.session.allocator_history is not None, what="the allocator history recording")
        else:
            await until(pilot, lambda: any("allocator history is CUDA's" in n for n in notes(app)), what="history refused")

        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

        table = app.query_one("#runs")
        assert table.row_count >= finished(app)
        await pilot.press("q")
    assert app.return_code in (0, None)


async def test_profile_steps_profiles_the_first_run_and_keeps_its_verdict_in_its_row(tmp_path):
    from tui_app.cli import parse
    from tui_app.ui.launch import _app

    _, opts = parse(["run", "--profile-steps", "4", "--max-new-tokens", "16", "--ignore-eos", "--out-dir", str(tmp_path), "--no-record"])
    app = _app(opts, engine_source(EngineConfig()), None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, AnatomyScreen), timeout=90, what="the first run's anatomy")
        first = app.session.rows()[0].run_id
        assert app.session.anatomy.run_id == first and app.session.anatomy.steps == 4
        assert Path(app.session.anatomy.trace).parent == tmp_path and Path(app.session.anatomy.trace).exists()
        await until(pilot, lambda: finished(app) >= 1, what="the profiled run's end")
        verdict = app.session.rows()[0].roofline
        assert verdict is not None and any(m.label == "profiled 4" for m in app.session.markers)
        await pilot.press("escape")
        await until(pilot, lambda: f"wall: {verdict.short()}" in status_text(app), what="the verdict in the status line")
        await pilot.press("q")


async def test_engine_killed_mid_run_is_shown_and_restart_recovers(tmp_path):
    """Killed while paused mid-run, where the engine's pause phase says it is (the UI's screen can
    lag the engine by seconds on a loaded machine, and a run it drew begun could be over); the new
    engine starts unpaused, and its run finishes."""
    app = live_app(tmp_path, max_new=64)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: app.session.token_count > 3, what="tokens")
        await pilot.press("space")
        await until(pilot, lambda: app.session.phase is not None and app.session.phase.name == "pause" and not app.session.phase.done, what="the engine paused")
        os.kill(app.source.pid, signal.SIGKILL)
        await until(pilot, lambda: app.session.fatal is not None, what="death noticed")
        assert "SIGKILL" in app.state and "R" in app.state
        assert app.session.rows()[-1].note == "engine died"
        await pilot.press("R")
        assert not app.paused
        await until(pilot, lambda: finished(app) >= 1, timeout=120, what="run after restart")


async def test_small_terminals_stack_then_hide_panes():
    app = TokentopApp(ReplaySource(session_events(), speed=0), None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.5)
        shown = [c.id for c in app.query("#charts > *") if c.display]
        assert shown == ["latency"]
        await pilot.press("v")
        assert [c.id for c in app.query("#charts > *") if c.display] == ["kv"]
        await pilot.resize_terminal(20, 5)
        await pilot.pause(0.3)
        assert app.screen.has_class("-tiny")
        await pilot.resize_terminal(200, 60)
        await pilot.pause(0.3)
        assert not app.screen.has_class("-narrow") and all(c.display for c in app.query("#charts > *"))


async def test_replay_shows_the_recorded_runs_and_refuses_levers():
    app = TokentopApp(ReplaySource(session_events(), speed=0), None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await pilot.pause(0.5)
        assert len(app.session.finished_ids) == 3
        assert app.query_one("#runs").row_count == 3 + 2  # run 2 has two lever segments
        await pilot.press("w")
        await pilot.pause(0.1)
        assert any("replay" in n for n in notes(app))
        await pilot.press("m")  # the memory read rate is measured by a live engine only
        await pilot.pause(0.1)
        assert any("memory read rate of its own engine only" in n for n in notes(app))
        await pilot.press("H")
        await pilot.pause(0.1)
        assert any("not a replay's" in n for n in notes(app))
        await pilot.press("p")
        await pilot.pause(0.1)
        assert any("the anatomy is tokentop's own engine's" in n for n in notes(app))
        # the recording's own measurement still draws the figure: the int8 run's last decode steps
        assert app.session.bandwidth.quant == "int8" and readings.read_rate(app.session) is not None


class EndsAfterADrain:
    """A process that sends its run's last events and ends just after a frame's drain found nothing:
    the interleaving a real one leaves to chance (a drain, then the process ends, then the check of
    its death), held here at every frame."""

    live, kind, pid, server_pid, can_pause, restartable, step_mode, done = True, "engine", None, None, False, False, False, False

    def __init__(self):
        events = session_events(runs=1)
        self.last = [ev for ev in events if isinstance(ev, RunFinished)]
        self.queued = [ev for ev in events if not isinstance(ev, RunFinished)]
        self.state = "running"

    def drain(self) -> list:
        out, self.queued = self.queued, []
        if not out and self.state == "running":
            self.state = "ending"  # sent the rest now, and ended
        return out

    def death(self) -> str | None:
        if self.state != "ending":
            return None
        self.state, self.queued = "ended", self.last
        return "engine process exited with code 1"

    def start(self) -> None: ...
    def send(self, *cmd) -> None: ...
    def close(self) -> None: ...


async def test_a_process_that_ends_after_its_last_run_leaves_that_run_finished_and_its_end_said():
    """Whatever a process sent before it ended is read before its run is called cut off: the run it
    finished stays finished, and the status line keeps saying how it ended."""
    app = TokentopApp(EndsAfterADrain(), None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: app.session.fatal is not None, timeout=10, what="the end noticed")
        await pilot.pause(0.3)  # frames after it: nothing more to come
        assert finished(app) == 1 and app.session.died == {}
        assert app.state.startswith("engine process exited with code 1"), app.state


@pytest.mark.serial
async def test_events_keep_flowing_while_a_modal_is_open():
    """With help or the prompt dialog open, the engine's events still reach the panes behind."""
    from tests.helpers.synthetic import session_events as events

    source = ReplaySource(events(), speed=5)  # about 2 s of events, most arriving behind the modal
    app = TokentopApp(source, None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await pilot.press("question_mark")
        assert len(app.session.finished_ids) < 3
        await pilot.pause(3.5)
        assert isinstance(app.screen, HelpScreen)
        assert len(app.session.finished_ids) == 3 and app.tokens.chunks
        await pilot.press("escape")


async def test_opening_help_and_the_palette_keeps_no_widgets_behind():
    """After many openings, no widget is left behind: a key bar that kept every key widget it
    rebuilt on a screen change (Textual's Footer does) costs 0.8 MB per help opening, 6 MB a minute
    of the soak's UI memory."""
    import gc
    from collections import Counter

    from textual.widget import Widget

    def widgets():
        gc.collect()
        return Counter(type(o).__name__ for o in gc.get_objects() if issubclass(type(o), Widget))

    app = TokentopApp(ReplaySource(session_events(runs=2), speed=0), None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        for key in ("question_mark", "ctrl+p"):  # each once first: widgets made on first use stay
            await pilot.press(key)
            await pilot.pause(0.05)
            await pilot.press("escape")
        await pilot.pause(0.3)
        before = widgets()
        for i in range(10):
            await pilot.press("question_mark" if i % 2 else "ctrl+p")
            await pilot.pause(0.05)
            await pilot.press("escape")
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert widgets() - before == Counter()


async def test_replay_step_mode_advances_one_step_per_space():
    from monitors.events import Step as StepEvent

    evs = session_events()
    app = TokentopApp(ReplaySource(evs, step_mode=True), None)
    async with app.run_test(size=APP_SIZE) as pilot:
        await pilot.pause(0.5)
        assert app.session.token_count == 0  # nothing before the first step is asked for
        for n in (1, 2, 3):
            await pilot.press("space")
            await pilot.pause(0.4)
            assert app.session.token_count == n
        first_steps = [e.text for e in evs if isinstance(e, StepEvent)][:3]
        assert "".join(t for t, *_ in app.tokens.chunks).endswith("".join(first_steps))


async def test_restart_of_a_working_engine_asks_first_and_keeps_every_run(tmp_path):
    """Run numbers continue across engine restarts: a second "run 1" replaced the first in the runs
    table, the export and replay --stats. A working engine is restarted only after a yes."""
    import json

    from monitors.record import Recorder, read_recording
    from tui_app.core.export import export_session
    from tui_app.core.session import Session
    from tui_app.ui.screens.confirm import ConfirmScreen

    rec_path = tmp_path / "s.jsonl"
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=4), recorder=Recorder(rec_path), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, what="the first run")
        pid = app.source.pid
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert app.source.pid == pid and any("not restarted" in n for n in notes(app))
        await pilot.press("R")
        await pilot.press("y")
        await until(pilot, lambda: finished(app) >= 2, timeout=120, what="a run on the new engine")
        assert app.source.pid != pid
        assert list(app.session.finished_ids) == [1, 2]
        export_session(app.session, str(tmp_path / "x.json"))
        assert [r["run"] for r in json.loads((tmp_path / "x.json").read_text())["runs"]] == ["1", "2"]
        await pilot.press("q")
    replayed = Session.from_events(read_recording(rec_path).events)
    assert [row.label for row in replayed.rows()] == ["1", "2"] and all(row.finished for row in replayed.rows())


async def test_every_key_answers_at_once(tmp_path):
    """r mid-run says the run stopped and its row says so; a lever or the prompt preset while idle
    says it applies to the next run (and starts none); v with every chart shown says so; after
    s → off the status does not name the draft."""
    app = live_app(tmp_path, max_new=120)
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: app.session.token_count > 3, what="tokens")
        await pilot.press("r")
        assert any("run 1 stopped" in n for n in notes(app))
        await until(pilot, lambda: finished(app) >= 2, timeout=120, what="the rerun")
        assert app.session.rows()[0].note.startswith("stopped")
        assert "stopped" in app.query_one("#runs")._strips[1].text

        runs = len(app.session.timer.runs)
        await pilot.press("k")
        await until(pilot, lambda: "for the next run" in status_text(app), timeout=1, what="the answer, within a frame or two")
        await until(pilot, lambda: not app.session.levers.cache, what="cache off")
        assert "cache → off for the next run" in status_text(app)
        await pilot.press("l")
        await until(pilot, lambda: "prompt long for the next run" in status_text(app), timeout=1, what="the preset's answer")
        await pilot.pause(1.0)
        assert len(app.session.timer.runs) == runs and not app.running

        await pilot.press("v")
        assert any("all four charts already show" in n for n in notes(app))

        await pilot.press("k", "s", "s")
        await until(pilot, lambda: app.session.levers.spec == "draft", what="draft")
        await pilot.press("s")
        await until(pilot, lambda: app.session.levers.spec == "off", what="spec off")
        assert "draft" not in status_text(app)
        await pilot.press("q")


@pytest.mark.serial
async def test_a_phase_in_progress_shows_its_elapsed_time():
    from monitors.events import Phase

    events = session_events(runs=1, tokens=4)
    first_step = next(i for i, e in enumerate(events) if type(e).__name__ == "Step")
    events.insert(first_step, Phase(name="compile", detail="compiling the decode step (static cache 256, batch 1, off)", done=False))
    app = TokentopApp(ReplaySource(events, speed=0, step_mode=True), None)  # held at that step
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: "compiling the decode step" in status_text(app), what="the phase shown")
        await pilot.pause(1.2)
        assert re.search(r"compiling the decode step .*… [1-9]\d* s", status_text(app)), status_text(app)


async def test_palette_entries_are_sentences_for_every_key():
    """They read "tokentop: KV cache" and "help (question_mark)"."""
    from tui_app.ui.palette import ENTRIES, KeyCommands

    app = TokentopApp(ReplaySource(session_events(runs=1, tokens=4), speed=0), None)
    async with app.run_test(size=APP_SIZE):
        provider = KeyCommands(app.screen)
        ours = [hit async for hit in provider.discover()]
        found = [hit async for hit in provider.search("kv cache")]
    assert {b.action for b in app.BINDINGS if b.action not in ("quit",)} <= set(ENTRIES)
    assert len(ours) == len(ENTRIES)
    for c in ours:
        assert c.text[0].isupper() and "tokentop:" not in c.text and "_" not in c.help, (c.text, c.help)
    assert any(c.help == "key: ?" for c in ours)
    assert [h.text for h in found][:1] == [ENTRIES["lever('cache')"]] and found[0].help == "key: k"


def test_the_help_screen_has_a_row_for_every_key():
    from tui_app.ui.palette import KEYS
    from tui_app.ui.screens.help import HELP

    shown = {"question_mark": "?"}
    assert [b.key for b in KEYS if f"| `{shown.get(b.key, b.key)}`" not in HELP and f", `{b.key}`" not in HELP] == []
