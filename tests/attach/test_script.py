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

from benchmarks.common.tmux import TmuxApp
from monitors.events import Levers, RunFinished, RunStarted, Step
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


@pytest.mark.serial
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


@pytest.mark.serial
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


def test_a_loop_without_a_cache_is_one_run_a_token_a_forward_and_says_its_cache_is_off(folder, tmp_path):
    """The loop that feeds the whole sequence back each step: a forward whose input is the last
    one's plus a token goes on the same run (argmax, sampling, a batch of two rows), whose cache
    is off with the reason and holds no KV; a chat's second turn, the conversation from the start,
    is a run of its own."""
    from tui_app.attach.script_loop import NO_CACHE

    rec, new = tmp_path / "whole.jsonl", 8
    script = SCRIPTS / "whole_context_loop.py"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(script), folder, "argmax,sample,batch,chat", str(new))
    assert done.returncode == 0, done.stderr[-2000:]
    prompts = [int(x) for x in re.findall(r"^PROMPT (\d+)$", done.stdout, re.M)]
    rows = [line for line in done.stderr.splitlines() if line.startswith("run ")]
    assert len(prompts) == len(rows) == 5, done.stdout + done.stderr[-2000:]
    assert all("[no-cache" in r and f"KV 0 B (cache off: {NO_CACHE})" in r for r in rows), rows
    events = read_recording(str(rec)).events
    started = [ev for ev in events if isinstance(ev, RunStarted)]
    finished = [ev for ev in events if isinstance(ev, RunFinished)]
    assert [ev.prompt_tokens for ev in started] == prompts and [ev.levers.batch for ev in started] == [1, 1, 2, 1, 1]
    assert all(not ev.levers.cache and ev.cache_note == NO_CACHE for ev in started)
    assert [repr(ev.text) for ev in finished] == re.findall(r"^TEXT (.*)$", done.stdout, re.M)
    assert [ev.n_tokens for ev in finished] == [new - 1] * 5  # the last token chosen is never fed back
    steps = [ev for ev in events if isinstance(ev, Step)]
    assert len(steps) == 5 * (new - 1) and not any(s.kv_bytes or s.kv_alloc_bytes for s in steps)


@pytest.mark.serial
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


def test_the_scripts_own_processes_are_watched_a_subprocess_and_a_forked_worker(folder, tmp_path):
    """A script generating in a Python subprocess and then in a multiprocessing worker forked with a
    copy of the hook (its writer's thread left behind; the worker ends in os._exit, past atexit):
    each call is a run, the second numbered on from the first, its text the process's own."""
    rec = tmp_path / "children.jsonl"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(SCRIPTS / "children.py"), folder, "one-by-one")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [int(r) for r, _ in ROW.findall(done.stderr)] == [1, 2], done.stderr[-2000:]
    events = read_recording(str(rec)).events
    finished = [ev for ev in events if isinstance(ev, RunFinished)]
    assert [repr(ev.text) for ev in finished] == re.findall(r"^TEXT (.*)$", done.stdout, re.M)
    assert [len([s for s in events if isinstance(s, Step) and s.run_id == ev.run_id]) for ev in finished] == [24, 24]
    # Each process's model line names it: two processes, neither the script's own.
    pids = {int(m) for m in re.findall(r"^tokentop: watching .* \(pid (\d+)\)", done.stderr, re.M)}
    assert len(pids) == 2, done.stderr[-2000:]


def test_processes_generating_together_show_one_run_at_a_time(folder, tmp_path):
    """Two processes generating at the same moment (a torchrun's ranks): the panes take one run at a
    time, each whole, numbered 1, 2, …; the other's, overlapping, are said once and left out."""
    rec = tmp_path / "ranks.jsonl"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(SCRIPTS / "children.py"), folder, "together", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(re.findall(r"^TEXT ", done.stdout, re.M)) == 4
    assert "is not shown: one process's at a time" in done.stderr, done.stderr[-2000:]
    runs = [ev for ev in read_recording(str(rec)).events if isinstance(ev, (RunStarted, Step, RunFinished))]
    order = [(type(ev).__name__, ev.run_id) for ev in runs if not isinstance(ev, Step)]
    shown = [run_id for kind, run_id in order if kind == "RunStarted"]
    assert 2 <= len(shown) < 4 and shown == list(range(1, len(shown) + 1)), order
    assert order == [(kind, n) for n in shown for kind in ("RunStarted", "RunFinished")], order  # never two open at once
    assert all(len([s for s in runs if isinstance(s, Step) and s.run_id == n]) == 24 for n in shown)


@pytest.mark.serial
def test_torchruns_ranks_are_watched_each_call_a_rank_s_own(folder, tmp_path):
    """`tokentop -- torchrun --nproc_per_node=2 script.py`: the ranks are torchrun's children, each
    watched; every row shown is one rank's call, its ITL p50 that rank's own within 5 %."""
    torchrun = Path(sys.executable).with_name("torchrun")
    # torchrun's logs go beside the test's files: by default a torchelastic_* folder in /tmp, kept.
    launch = [str(torchrun), f"--log-dir={tmp_path}", "--nproc_per_node=2"]
    done = tokentop("--no-tui", "--no-record", "--", *launch, str(SCRIPTS / "pipeline_script.py"), folder, "1")
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = [float(x) for x in re.findall(r"^ITL_MS ([\d.]+)$", done.stdout, re.M)]
    rows = ROW.findall(done.stderr)
    assert len(theirs) == 2 and 1 <= len(rows) <= 2, done.stdout + done.stderr[-2000:]
    # One row when the ranks' calls overlapped (the other said once), two when they did not.
    assert len(rows) == 2 or "is not shown: one process's at a time" in done.stderr
    assert all(min(abs(float(ours) / t - 1) for t in theirs) <= 0.05 for _, ours in rows), (rows, theirs)


def test_the_scripts_own_levers_are_read_from_its_model(tmp_path):
    """The header and the runs table show the script's levers, not tokentop's defaults: a model it
    loaded quantized (transformers' torchao config), a forward it compiled, a call without a cache."""
    import torch
    import transformers as tf

    from tui_app.attach.hook_writer import Writer
    from tui_app.attach.script_hook import Call, Hook

    config = tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    tf.LlamaForCausalLM(config).save_pretrained(tmp_path)
    hook = Hook(Writer(tmp_path / "nobody.sock"))

    def levers(model, **kwargs):
        return Call(hook, model, 1, kwargs).started(0, [1, 2, 3], 1)[-1].levers

    plain = tf.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert levers(plain) == Levers()
    assert levers(plain, use_cache=False) == Levers(cache=False)
    plain.forward = torch.compile(plain.forward)  # compiled when first called; its wrapper says so now
    assert levers(plain).compile
    from torchao.quantization import Int8WeightOnlyConfig

    quantized = tf.AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=tf.TorchAoConfig(Int8WeightOnlyConfig()))
    assert levers(quantized).quant == "torchao:Int8WeightOnly"


def test_a_dynamic_cache_read_after_it_grew_is_not_taken_for_a_preallocated_one():
    """The hook's thread measures a token's cache after generation went on: a dynamic cache then
    holds more tokens than the step's. Its bytes are the step's share, and nothing is drawn as
    allocated beyond them (the KV pane's "static" line is for caches that preallocate)."""
    import torch
    import transformers as tf

    from tui_app.attach.hook_writer import Writer
    from tui_app.attach.script_hook import Call, Hook

    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    call = Call(Hook(Writer(Path("nobody.sock"))), tf.LlamaForCausalLM(config), 1, {})
    call.started(0, [1, 2, 3, 4, 5], 1)
    call.cache = tf.DynamicCache(config=config)
    for layer in range(2):  # 5 prompt tokens and 3 made since: the cache as the hook finds it, late
        call.cache.update(torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8), layer)
    (step,) = call.tokens(1, [7], 1)
    per_token = 2 * 4 * 2 * 2 * 8  # K and V, fp32, 2 layers, 2 KV heads of 8
    assert step.seq_len == 5 and step.kv_bytes == step.kv_alloc_bytes == 5 * per_token


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
    """tokentop's sitecustomize runs the one it hides, and its `monitors` is not the script's, even
    once the script imports transformers (when tokentop's hook, which uses its own monitors, loads)."""
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    (tmp_path / "monitors").mkdir()
    (tmp_path / "monitors" / "__init__.py").write_text("WHOSE = 'theirs'\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = (
        "import builtins, monitors, transformers, sys; import monitors.x as x; "
        + "print(builtins.THEIRS, monitors.WHOSE, x.WHOSE, sys.modules['monitors'].WHOSE, sep='|')"
    )
    (tmp_path / "monitors" / "x.py").write_text("WHOSE = 'theirs too'\n")
    done = tokentop("--no-tui", "--no-record", "--", sys.executable, "-c", code, env=env, cwd=tmp_path.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split("|") == ["ran", "theirs", "theirs too", "theirs"], done.stdout
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


def test_a_socket_that_cannot_be_made_is_one_line(tmp_path):
    """The script's events come in on a socket in a folder of tokentop's under TMPDIR: under one
    whose path is longer than a Unix socket's name may be (108 bytes on Linux), one line."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    done = tokentop("--no-tui", "--no-record", "--", "true", env={**os.environ, "TMPDIR": str(deep)})
    assert done.returncode == 127 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("tokentop: cannot make the socket the script's events come in on: "), done.stderr


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


@pytest.mark.serial
def test_a_notebook_sends_to_a_listener_that_dies_and_comes_back(folder, tmp_path):
    """`tokentop.watch(model, tok)` in a notebook-like process, `tokentop listen` killed (-9) after its
    first row and started again two seconds later: generation never stalls (no call waits off
    the CPU for half a median call), the new listener replaces the dead one's socket and shows the later calls,
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
    # A stall is time a call waits off the CPU: its wall time less its CPU time. The wall time
    # alone moved 1.9-5.5 s a call from one call to the next on a machine whose memory bandwidth
    # swung 14-23 GB/s every few seconds (the Zen 4, 2026-12-02), CPU time with it.
    calls = [(float(wall), float(cpu)) for wall, cpu in re.findall(r"^CALL \d+ ([\d.]+) ([\d.]+)$", out, re.M)]
    waits = [wall - cpu for wall, cpu in calls[1:]]
    assert len(calls) == 8 and max(waits) < 0.5 * statistics.median(wall for wall, _ in calls), calls
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


def test_an_moe_scripts_routing_is_counted_as_its_routers_chose(tmp_path):
    """A script's own MoE (a random-weight Qwen3-MoE): the expert counts of a generate() and of a
    hand-written loop's run, each read once at its end, equal the script's own recount from its
    routers' logits; the model line names the routing, and the expert pane draws it."""
    import json

    from monitors.events import EngineReady, ExpertLoad
    from tests.helpers.tiny_models import E, K, save_moe
    from tui_app.commands.report.experts import counted_by
    from tui_app.core.session import Session
    from tui_app.ui.screens.experts import render

    save_moe("qwen3moe", tmp_path / "moe")
    rec = tmp_path / "moe.jsonl"
    done = tokentop("--no-tui", "--record", str(rec), "--", sys.executable, str(SCRIPTS / "moe_generate.py"), str(tmp_path / "moe"), "generate,loop")
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = [json.loads(x) for x in re.findall(r"^COUNTS (.*)$", done.stdout, re.M)]
    events = read_recording(str(rec)).events
    assert len(theirs) == 2 and [ev.expert_counts for ev in events if isinstance(ev, RunFinished)] == theirs
    assert [ev.counts for ev in events if isinstance(ev, ExpertLoad)] == theirs
    ready = next(ev for ev in events if isinstance(ev, EngineReady))
    assert ready.routing == {"layers": 3, "experts": E, "top_k": K, "shared": 0} and ready.experts == f"{E} experts, {K} a token"
    assert done.stderr.count("experts max/mean") == 2, done.stderr[-2000:]
    session = Session.from_events(events)
    assert counted_by(session).startswith("as the hook counted them in the script's process")  # the report's caption
    shown = render(session, 120, 30, "run").plain
    assert f"Experts: 3 MoE layers × {E} routed experts, {K} a token" in shown and f"run 2 so far: {sum(theirs[1][0]) // K} positions" in shown, shown
