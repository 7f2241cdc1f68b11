"""`tokentop -- python my_script.py`: a script that is not tokentop's (tests/attach/scripts/), on the
default model's weights as a local folder, watched unchanged. Its text, its own per-token times
and its exit code against what tokentop shows; Ctrl-C; a sitecustomize and a `monitors` package
of the script's own left working; a command that cannot run, in one line."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks._tmux import TmuxApp
from monitors.events import RunFinished, RunStarted, Step
from monitors.record import read_recording
from tui_app.commands.script import UNSEEN

SCRIPTS = Path(__file__).with_name("scripts")
TOKENTOP = [sys.executable, "-m", "tui_app"]
ROW = re.compile(r"^run (\d+) .* ITL p50 ([\d.]+) ms", re.M)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder() -> str:
    from tui_app.engine.models import converted_default

    return str(converted_default())


def tokentop(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*TOKENTOP, *args], capture_output=True, text=True, timeout=300, **kw)


def test_a_pipeline_script_is_watched_unchanged(folder, tmp_path):
    """Each generate() of the script's pipeline is a run: its text is the script's, the ITL p50 is
    the script's own (its own streamer's stamps) within 5 %, KV is measured from the real cache,
    the script's stdout is its own alone, and its exit code is tokentop's."""
    rec = tmp_path / "script.jsonl"
    script = SCRIPTS / "pipeline_script.py"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(script), folder, "2", "3")
    assert done.returncode == 3, done.stderr[-2000:]
    texts = re.findall(r"^TEXT (.*)$", done.stdout, re.M)
    theirs = [float(x) for x in re.findall(r"^ITL_MS ([\d.]+)$", done.stdout, re.M)]
    assert len(texts) == 2 and "run 1" not in done.stdout, done.stdout
    rows = ROW.findall(done.stderr)
    assert [int(r) for r, _ in rows] == [1, 2], done.stderr[-2000:]
    for (_, ours), script_ms in zip(rows, theirs, strict=True):
        assert abs(float(ours) / script_ms - 1) <= 0.05, (ours, script_ms)
    events = read_recording(str(rec)).events
    finished = [ev for ev in events if isinstance(ev, RunFinished)]
    assert [repr(ev.text) for ev in finished] == texts
    started = [ev for ev in events if isinstance(ev, RunStarted)]
    assert started[0].prompt_text == "The capital of France is" and started[0].max_new_tokens == 24
    steps = [ev for ev in events if isinstance(ev, Step) and ev.run_id == 1]
    assert "".join(s.text for s in steps) == finished[0].text and len(steps) == finished[0].n_tokens
    last = steps[-1]
    # The default model: 30 layers, 3 KV heads of 64, fp32; every token but the newest in the cache.
    assert last.seq_len == 5 + 24 - 1 and last.kv_bytes == 2 * 4 * last.seq_len * 30 * 3 * 64


def test_a_hand_written_loop_over_model_is_watched(folder, tmp_path):
    """A greedy loop over model(...) with no generate(): a run per prompt, a step per token the loop
    feeds back (the last one, never fed back, is not counted), the script's own ITL within 5 %."""
    rec = tmp_path / "loop.jsonl"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(SCRIPTS / "greedy_loop.py"), folder, "2")
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = [float(x) for x in re.findall(r"^ITL_MS ([\d.]+)$", done.stdout, re.M)]
    rows = ROW.findall(done.stderr)
    assert [int(r) for r, _ in rows] == [1, 2], done.stderr[-2000:]
    for (_, ours), script_ms in zip(rows, theirs, strict=True):
        assert abs(float(ours) / script_ms - 1) <= 0.05, (ours, script_ms)
    finished = [ev for ev in read_recording(str(rec)).events if isinstance(ev, RunFinished)]
    assert [repr(ev.text) for ev in finished] == re.findall(r"^TEXT (.*)$", done.stdout, re.M)
    assert [ev.n_tokens for ev in finished] == [23, 23]


def test_beam_search_is_a_step_a_forward_and_its_best_text(folder, tmp_path):
    """Beam search, which streams nothing: a step per forward (as many as the script's own logits
    processor was called), the median step the script's own within 5 %, the best sequence's text
    with the last step, and KV measured from the beams' cache equal to the formula over 4 rows."""
    rec = tmp_path / "beams.jsonl"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(SCRIPTS / "beam_search.py"), folder, "4", "16")
    assert done.returncode == 0, done.stderr[-2000:]
    (_, ours), *more = ROW.findall(done.stderr)
    theirs = float(re.search(r"^ITL_MS ([\d.]+)$", done.stdout, re.M).group(1))
    assert not more and abs(float(ours) / theirs - 1) <= 0.05, (ours, theirs)
    events = read_recording(str(rec)).events
    steps = [ev for ev in events if isinstance(ev, Step)]
    assert len(steps) == int(re.search(r"^STEPS (\d+)$", done.stdout, re.M).group(1)) == 16
    (started,) = [ev for ev in events if isinstance(ev, RunStarted)]
    (finished,) = [ev for ev in events if isinstance(ev, RunFinished)]
    assert started.levers.batch == 4 and started.prompt_tokens == 5 and finished.n_tokens == 16
    assert [s.text for s in steps[:-1]] == [""] * 15 and repr(steps[-1].text) == repr(finished.text) == re.search(r"^TEXT (.*)$", done.stdout, re.M).group(1)
    assert steps[-1].seq_len == 5 + 16 - 1 and steps[-1].kv_bytes == 2 * 4 * 4 * steps[-1].seq_len * 30 * 3 * 64


def test_ctrl_c_stops_the_script_and_tokentop(folder):
    """Ctrl-C at the terminal reaches both (one process group): the script ends as Python ends on
    SIGINT, tokentop says so in one line and returns 130, with no traceback of its own."""
    proc = subprocess.Popen(
        [*TOKENTOP, "--no-tui", "--no-record", "--", sys.executable, str(SCRIPTS / "pipeline_script.py"), folder, "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().startswith("TEXT"), "the script's first call"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "tokentop: interrupted" in err
    # The script's own KeyboardInterrupt traceback is its own (its generate call passes through the hook)
    assert "tui_app/cli.py" not in err and "tui_app/commands/" not in err, "no traceback of tokentop's own"


def test_the_scripts_own_sitecustomize_and_monitors_still_load(tmp_path):
    """tokentop's sitecustomize runs the one it hides, and its `monitors` is not the script's."""
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    (tmp_path / "monitors").mkdir()
    (tmp_path / "monitors" / "__init__.py").write_text("WHOSE = 'theirs'\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = "import builtins, monitors; print(builtins.THEIRS, monitors.WHOSE)"
    done = tokentop("--no-tui", "--no-record", "--", sys.executable, "-c", code, env=env, cwd=tmp_path.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ran", "theirs"], done.stdout
    assert done.stderr.strip() == f"tokentop: {UNSEEN}"


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (["--no-tui", "--no-record", "--", "no-such-program-here"], 127, "tokentop: cannot run 'no-such-program-here': No such file or directory"),
        (["--no-tui", "--"], 2, "tokentop: nothing to run"),
        (["--no-tui", "--record", "/proc/no/such.jsonl", "--", "true"], 2, "tokentop: "),
        (["listen", "--no-tui", "--record", "/proc/no/such.jsonl"], 2, "tokentop: "),
    ],
)
def test_a_command_that_cannot_run_is_one_line(argv, code, line):
    done = tokentop(*argv)
    assert done.returncode == code and done.stderr.startswith(line) and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_tui_shows_the_scripts_runs_and_returns_its_exit_code(folder, tmp_path):
    """Under the TUI (tmux): the script's text in the token pane, its runs in the table, its end
    said with its exit code, and that code tokentop's once q is pressed."""
    env = {"TOKENTOP_CACHE": str(tmp_path)}
    app = TmuxApp("tt-script", ["--no-record", "--", sys.executable, str(SCRIPTS / "pipeline_script.py"), folder, "2", "5"], env=env)
    try:
        app.wait_for(lambda s: "the script process exited with code 5" in s, timeout=120)
        screen = app.pane()
        assert "The capital of France is" in screen and "Paris" in screen, screen
        assert re.search(r"^│ 2 +cache +5 +24 ", screen, re.M), screen
        app.keys("w")  # the script's levers are its own: said, not switched
        app.wait_for(lambda s: "the script sets its own quant" in s, timeout=10)
        app.keys("o", "o", "o")  # the tokens' confidence is measured by tokentop's own engine only
        app.wait_for(lambda s: "measured inside tokentop's own engine only" in s, timeout=10)
        app.keys("q")
        app.wait_for(lambda s: "TOKENTOP-EXIT=5" in s, timeout=20)
    finally:
        app.close(wait=False)
    assert "TEXT" in (tmp_path / "script.log").read_text(), "the script's output kept in the log"


def _listener(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([*TOKENTOP, "listen", "--no-tui", "--no-record"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "listening on" in proc.stderr.readline()
    return proc


def test_a_notebook_sends_to_a_listener_that_dies_and_comes_back(folder, tmp_path):
    """`tokentop.watch(model, tok)` in a notebook-like process, `tokentop listen` killed (-9) after its
    first row and started again two seconds later: generation never stalls (no call slower than
    twice the median), the new listener replaces the dead one's socket and shows the later calls,
    numbered on as the notebook numbers them; killing it never reaches the notebook."""
    env = {**os.environ, "TOKENTOP_CACHE": str(tmp_path)}
    first = _listener(env)
    again = None
    notebook = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "notebook.py"), folder, "8"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert first.stdout.readline().startswith("run 1 "), "the first listener's first row"
        first.kill()
        first.wait()
        time.sleep(2.0)
        again = _listener(env)
        out, _ = notebook.communicate(timeout=300)
        time.sleep(0.5)
        again.send_signal(signal.SIGINT)
        rows, _ = again.communicate(timeout=30)
    finally:
        for proc in (first, notebook, again):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert notebook.returncode == 0
    seconds = [float(x) for x in re.findall(r"^CALL \d+ ([\d.]+)$", out, re.M)]
    assert len(seconds) == 8 and max(seconds[1:]) < 2 * statistics.median(seconds), seconds
    seen = [int(n) for n in re.findall(r"^run (\d+) ", rows, re.M)]
    assert again.returncode == 0 and seen and seen[-1] == 8 and seen[0] > 1, rows
    # The first may be a call the listener joined mid-way (sent the run in progress on connecting:
    # the tokens since then, no TTFT); every one after it whole.
    assert all("new 24 tok" in line for line in [r for r in rows.splitlines() if r.startswith("run ")][1:]), rows


def test_a_second_listener_on_the_same_socket_is_one_line(tmp_path):
    env = {**os.environ, "TOKENTOP_CACHE": str(tmp_path)}
    first = _listener(env)
    try:
        second = tokentop("listen", "--no-tui", "--no-record", env=env)
        assert second.returncode == 2 and second.stderr.strip() == f"tokentop: another tokentop listen is running on {tmp_path}/listen/tokentop.sock"
        assert (tmp_path / "listen").stat().st_mode & 0o777 == 0o700 and (tmp_path / "listen" / "tokentop.sock").stat().st_mode & 0o777 == 0o600
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0
    assert not (tmp_path / "listen" / "tokentop.sock").exists(), "the socket removed at the end"
