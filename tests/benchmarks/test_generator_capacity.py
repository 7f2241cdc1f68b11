"""benchmarks/generator_capacity.py's figures by their formulas, and the stand-in it measures with:
each request's arrival noted outside the generator, in the generator's order and count."""

import itertools
import json
import subprocess
import sys

import pytest

from benchmarks.generator_capacity import send_errors
from tests.helpers.sse_standin import SseStandIn


def test_send_error_is_the_lateness_beyond_the_earliest_offset():
    rate = 50.0
    ideal = [int(1e9 + i / rate * 1e9) for i in range(10)]
    achieved, late = send_errors(ideal, rate)
    assert achieved == pytest.approx(rate) and max(late) == pytest.approx(0, abs=1e-9)
    shifted = [t + 250_000 for t in ideal]  # the loopback's own latency: the same for every request, not an error
    assert send_errors(shifted, rate)[1] == pytest.approx(late, abs=1e-9)
    one_late = [*ideal[:4], ideal[4] + 3_000_000, *ideal[5:]]
    assert send_errors(one_late, rate)[1][4] == pytest.approx(0.003)


def test_the_stand_in_notes_every_request_of_an_open_loop(tmp_path):
    standin = SseStandIn(gap_ms=0.5)
    try:
        args = ("--lengths", "8:6", "--rate", "20", "--burstiness", "inf", "--requests", "12", "--repeats", "1", "--warmup", "0")
        out = subprocess.run(
            [sys.executable, "-m", "tui_app", "bench", "--endpoint", standin.url, *args, "-o", "json", "--out", str(tmp_path / "b")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        arrivals = standin.arrivals()
    finally:
        standin.close()
    reqs = json.loads((tmp_path / "b.json").read_text())["requests"][0]
    assert len(arrivals) == 12 and all(r["ok"] and r["tokens"] == 6 for r in reqs)
    # The gaps the server saw are the schedule's (50 ms), within a loaded machine's jitter.
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(arrivals)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.05, rel=0.1)
