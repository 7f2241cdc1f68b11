"""The engine in its own process: commands in, events out, and its death reported, not suffered."""

import os
import signal

import pytest

from benchmarks.common.deadline import Deadline
from monitors.events import EngineError, EngineReady, LeverChanged, RunFinished, Step
from monitors.sampler import Sampler
from tests.monitors.test_system import PAGE, statm_rss, walked_rss
from tui_app.engine.generation import EngineConfig
from tui_app.engine.main import engine_main
from tui_app.process import EngineProcess
from tui_app.requests import Run, RunRequest, SetLever, Stop


def wait_for(proc, kind, timeout=120, seen=None):
    seen = [] if seen is None else seen
    deadline = Deadline(timeout)
    while not deadline.passed():
        ev = proc.get(timeout=0.5)
        if ev is not None:
            seen.append(ev)
            if isinstance(ev, kind):
                return ev, seen
        elif not proc.alive():
            break
    raise AssertionError(f"no {kind.__name__}; got {[type(e).__name__ for e in seen][-10:]}, {proc.exit_info()}")


@pytest.fixture
def proc():
    p = EngineProcess(EngineConfig(), target=engine_main).start()
    yield p
    p.shutdown()


def test_run_and_lever_across_the_process_boundary(proc):
    wait_for(proc, EngineReady)
    # the engine's RSS as the sampler shows it, against the kernel's accounts (the engine idles now)
    sampler = Sampler()
    sampler.watch("engine", proc.pid)
    low = statm_rss(proc.pid)
    rss = sampler.sample_once().processes["engine"].rss
    high = statm_rss(proc.pid)
    assert min(low, high) - 64 * PAGE <= rss <= max(low, high) + 64 * PAGE
    assert rss == pytest.approx(walked_rss(proc.pid), rel=0.01)
    proc.send(Run(RunRequest(max_new_tokens=12, ignore_eos=True)))
    fin, seen = wait_for(proc, RunFinished)
    assert fin.n_tokens == 12 and sum(e.n_tokens for e in seen if isinstance(e, Step)) == 12
    proc.send(SetLever("cache", False))
    ch, _ = wait_for(proc, LeverChanged)
    assert ch.levers.cache is False and ch.run_id is None
    # stop mid-run, then a queued run still happens
    proc.send(Run(RunRequest(max_new_tokens=200, ignore_eos=True)))
    wait_for(proc, Step)
    proc.send(Stop())
    proc.send(Run(RunRequest(max_new_tokens=3, ignore_eos=True)))
    first, _ = wait_for(proc, RunFinished)
    second, _ = wait_for(proc, RunFinished)
    assert first.stop_reason == "stopped" and second.n_tokens == 3


def test_engine_killed_mid_run_is_reported(proc):
    wait_for(proc, EngineReady)
    proc.send(Run(RunRequest(max_new_tokens=500, ignore_eos=True)))
    wait_for(proc, Step)
    os.kill(proc.pid, signal.SIGKILL)
    proc.proc.join(10)
    info = proc.exit_info()
    assert info.exitcode == -signal.SIGKILL and "SIGKILL" in info.message and "out of memory" in info.message
    proc.drain()  # draining a dead engine's queue does not raise


def test_a_model_that_cannot_load_is_a_fatal_event_not_a_traceback():
    p = EngineProcess(EngineConfig(model="no-such-org/no-such-model"), target=engine_main).start()
    try:
        err, _ = wait_for(p, EngineError, timeout=60)
        assert err.fatal and "never downloads" in err.message
        p.proc.join(10)
        assert p.exit_info().exitcode == 0
    finally:
        p.shutdown()


NICE_SCRIPT = """
import os, sys, time
sys.path.insert(0, {repo!r})
from tui_app import process


def idle(config, commands, events, log_path):
    time.sleep(30)


if __name__ == "__main__":
    before = os.getpriority(os.PRIO_PROCESS, 0)
    process.yield_to_children()
    process.yield_to_children()  # once a process
    child = process.EngineProcess(None, target=idle).start()
    import psutil
    print(before, os.getpriority(os.PRIO_PROCESS, 0), psutil.Process(child.pid).nice())
    child.proc.kill()
"""


def test_the_ui_steps_back_and_the_processes_it_starts_keep_their_priority(tmp_path):
    """The UI's threads at nice +5, once; an engine started afterwards (a restart) at the nice the UI had."""
    import subprocess
    import sys

    script = tmp_path / "nice.py"
    script.write_text(NICE_SCRIPT.format(repo=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    before, ui, child = map(int, out.stdout.split())
    assert ui == min(before + 5, 19) and child == before
