import os
import subprocess
import sys
import time

import psutil
import pytest

from monitors.sampler import Sampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_monitors_imports_without_textual():
    code = (
        "import sys, monitors, monitors.events, monitors.timing, monitors.kvcache, monitors.leaks, "
        "monitors.system, monitors.gpu, monitors.torch_memory, monitors.sampler, monitors.record\n"
        "bad = [m for m in ('textual', 'rich', 'tui_app') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_linter_contract_holds():
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    r = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "monitors is a UI-free library KEPT" in r.stdout


def test_sampler_readings_against_psutil_and_bounded_history():
    s = Sampler(hz=50, history=5)
    s.watch("engine", os.getpid())
    s.start()
    time.sleep(0.4)
    s.stop()
    snap = s.snapshot()
    assert len(snap) == 5  # a ring buffer: 20 samples taken, 5 kept
    last = snap[-1]
    rss = psutil.Process().memory_info().rss
    assert last.processes["engine"].rss == pytest.approx(rss, rel=0.05)
    assert last.processes["app"].threads >= 1
    vm = psutil.virtual_memory()
    assert last.system.mem_total == vm.total
    assert len(last.system.per_core) == psutil.cpu_count()
    assert all(0 <= c <= 100 for c in last.system.per_core)
    ts = [x.t_ns for x in snap]
    gaps = [(b - a) / 1e9 for a, b in zip(ts, ts[1:])]
    assert all(0.005 < g < 0.2 for g in gaps), gaps


def test_process_cpu_percent_against_an_independent_busy_loop():
    """A child spinning for ~1 s on one core reads near 100 %."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
    s = Sampler(hz=2)
    s.watch("engine", child.pid)
    time.sleep(0.3)
    s.sample_once()
    time.sleep(0.8)
    reading = s.sample_once().processes["engine"].cpu_percent
    child.wait()
    s.stop()
    assert 70 <= reading <= 105


def test_a_vanished_process_is_na_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    s = Sampler()
    s.watch("engine", child.pid)
    child.wait()
    p = s.sample_once().processes["engine"]
    assert p.rss is None and "gone" in p.reason
    s.stop()
