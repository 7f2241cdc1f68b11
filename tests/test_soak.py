"""The one-minute soak (benchmarks/soak.py runs the 30-minute one): random keys on the real app."""

import pytest

from benchmarks.soak import soak


@pytest.mark.slow
async def test_one_minute_of_random_keys(tmp_path):
    r = await soak(60, 500, seed=7, out_dir=str(tmp_path))
    assert r.crashed is None
    assert r.runs >= 5 and r.presses >= 60
    assert r.missing == [] and r.recorded_runs >= r.runs  # every finished run is in the recording
    assert abs(r.rss_growth) <= 0.05, (r.rss_start, r.rss_end)
    assert not r.verdict.startswith("SUSPECTED"), r.verdict
