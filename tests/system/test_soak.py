"""The one-minute soak (benchmarks/terminal/soak.py runs the 30-minute one): random keys on the real app."""

import re
import sys

import pytest

from benchmarks.common.heap import heap_parts
from benchmarks.terminal.soak import replay_growth, soak


# Not serial: it holds memory and what was recorded, not time. Beside the parallel tier's other
# two workers (the Zen 4, 2026-11-30) it made 23 runs where 5 are asked, its RSS within 5 %.
@pytest.mark.slow
async def test_one_minute_of_random_keys(tmp_path):
    r = await soak(80, 500, seed=7, out_dir=str(tmp_path), history=100)
    print("UI RSS trace (s, MiB):", r.rss_trace)
    assert r.crashed is None
    assert r.runs >= 5 and r.presses >= 60
    assert r.missing == [] and r.recorded_runs >= r.runs  # every finished run is in the recording
    assert not r.verdict.startswith("SUSPECTED"), r.verdict
    # The UI's RSS is still warming up within a minute (measured: +10-25 %); flatness within 5 %
    # is the 30-minute soak's criterion. Here: no runaway growth.
    assert r.rss_growth < 0.5, r.rss_trace
    # Where the memory went, from the recording: the replay stops at each mark it is asked for.
    grew = await replay_growth(str(tmp_path / "soak.jsonl"), [2, r.runs])
    print("\n".join(grew))
    first = re.match(r"run (\d+) → (\d+): [+-]\d+ KiB traced$", grew[0])
    assert first and 2 <= int(first[1]) < int(first[2]) <= r.recorded_runs, grew
    assert not any("no mark" in line for line in grew), grew


def test_the_rss_parts_count_what_was_allocated_where():
    """heap_parts, which tells the attached soak's RSS slope apart, against allocations of known size:
    small objects land in pymalloc's arenas, large buffers in the C heap."""
    malloc0, _, objects0 = heap_parts()
    small = [object() for _ in range(200_000)]  # 16 bytes each, in pymalloc's 16-byte class
    big = bytearray(8 * 2**20)  # over pymalloc's 512-byte limit: malloc's
    malloc1, arenas1, objects1 = heap_parts()
    list_mib = sys.getsizeof(small) / 2**20  # the list's own array is malloc's too
    assert objects1 - objects0 == pytest.approx(200_000 * sys.getsizeof(object()) / 2**20, rel=0.05)
    assert malloc1 - malloc0 == pytest.approx(8 + list_mib, abs=0.25)
    assert arenas1 >= objects1 > 0  # the objects live in the arenas (new ones or, after a long suite, free room in old ones)
    del small, big
