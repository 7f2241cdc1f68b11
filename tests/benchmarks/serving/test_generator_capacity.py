"""benchmarks/serving/generator_capacity.py's figures by their formulas, and the stand-in it measures with:
each request's arrival noted outside the generator, in the generator's order and count."""

import gc
import itertools
import json
import subprocess
import sys
import weakref

import pytest

from benchmarks.serving.generator_capacity import send_errors
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


@pytest.mark.serial
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


async def test_a_round_runs_on_a_frozen_heap_and_lets_nothing_go_uncollected():
    """The collector walks only what a round makes while the round runs (the heap before it is
    frozen: a full collection of it took 11-13 ms and delayed the requests due then), and the heap is
    thawed after it: a cycle made before the round and let go during it is collected."""
    from tui_app.attach.client import AttachConfig, ServerClient
    from tui_app.commands.serving import Item, run_round

    class Cycle:
        pass

    before = Cycle()
    before.me = before
    gone = weakref.ref(before)
    frozen: list[int] = []

    def on_done(sent) -> None:
        nonlocal before
        frozen.append(gc.get_freeze_count())
        before = None

    standin = SseStandIn(gap_ms=0.5)
    client = ServerClient(AttachConfig(url=standin.url + "/v1", chat=False, max_connections=None), lambda ev: None)
    try:
        await client.connect()
        done, _, _ = await run_round(client, [Item("hello there", 4, at_s=0.01 * i) for i in range(4)], 4, on_done)
    finally:
        await client.aclose()
        standin.close()
    assert [s.fin.n_tokens for s in done] == [4] * 4
    assert len(frozen) == 4 and min(frozen) > 0 and gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None
