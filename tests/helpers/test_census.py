"""The census of a tier's CPU: its kinds, and a real process's CPU counted as the kernel counts it."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.helpers.census import Census, kind


def test_the_tiers_processes_are_told_apart_by_their_command_lines():
    py = "/c/.venv/bin/python"
    assert kind([py, "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"], "python") == "pytest worker"
    spawned = [py, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=8, pipe_handle=12)", "--multiprocessing-fork"]
    assert kind(spawned, "python") == "engine or client (spawned)"
    assert kind([py, "-m", "tui_app", "run", "--no-tui"], "python") == "tokentop run"
    assert kind([py, "/c/.venv/bin/tokentop", "leakcheck", "--runs", "14"], "python") == "tokentop leakcheck"
    assert kind([py, "-m", "tests.helpers.llama_server"], "python") == "llama.cpp server"
    assert kind([py, "/c/tests/attach/scripts/children.py", "model"], "python") == "python children.py"
    assert kind(["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-quiet"], "cc1plus") == "cc1plus"


def test_a_process_that_burns_a_second_of_cpu_is_counted_a_second():
    census = Census()
    # A second of its own CPU, then still alive for two of the census's looks, so the last look
    # sees all of it: the kernel's count, in its 10-ms ticks, against the child's own clock.
    burn = "import time\nwhile time.process_time() < 1.0: pass\ntime.sleep(1.5)"
    proc = subprocess.Popen([sys.executable, "-c", burn])
    while proc.poll() is None:
        census.look()
        time.sleep(0.2)
    (rec,) = [r for (pid, _), r in census.seen.items() if pid == proc.pid]
    assert rec["kind"] == "python -c" and 0.95 <= rec["cpu"] - rec["from"] < 1.4
    assert any(k == "python -c" and s >= 0.95 for k, s, n in census.table()["kinds"])
