"""benchmarks/serving/pool.py: a turn's figures on the server's clock are those of its tokens, not
of the moment: the same requests served at another prefill and decode pace read the same."""

from __future__ import annotations

import math

import pytest

from benchmarks.serving.pool import Pooled
from benchmarks.serving.server_clock import Pace

PROMPT, NEW, REQUESTS, GAP = 16, 8, 16, 0.004  # the agreement test's c1; GAP: the client's and HTTP's own, a request


def one_at_a_time(pace: Pace) -> Pooled:
    """REQUESTS served one after the other: each request's prefill and decode at the pace, then a gap."""
    ttft = PROMPT * pace.prefill_s
    return Pooled(
        ttft=[ttft] * REQUESTS,
        itl=[pace.decode_s] * ((NEW - 1) * REQUESTS),
        tpot=[pace.decode_s] * REQUESTS,
        tokens=NEW * REQUESTS,
        wall_s=REQUESTS * (ttft + (NEW - 1) * pace.decode_s + GAP),
    )


@pytest.mark.parametrize("other", [Pace(0.0125, 0.019), Pace(0.017, 0.019), Pace(0.0125, 0.015)])
def test_the_same_requests_at_another_pace_read_the_same_on_the_servers_clock(other):
    """A prefill 36 % slower with the decode's unchanged moved the whole wall divided by the decode's
    pace by 20 %; split by phase it moves by the gaps alone (<1 %)."""
    base = Pace(0.0125, 0.019)
    a = one_at_a_time(base).on_server_clock(base, one_at_a_time=True).figures()
    b = one_at_a_time(other).on_server_clock(other, one_at_a_time=True).figures()
    for key in ("ttft_mean", "tpot_mean", "itl_p50", "output_tok_s"):
        assert b[key] == pytest.approx(a[key], rel=0.01), key
    as_measured = one_at_a_time(other).figures()["output_tok_s"] / one_at_a_time(base).figures()["output_tok_s"]
    assert other == base or abs(as_measured - 1) > 0.05  # what the clock divides out


def test_where_requests_overlap_no_output_rate_is_read_on_the_servers_clock():
    pace = Pace(0.0125, 0.019)
    figures = one_at_a_time(pace).on_server_clock(pace, one_at_a_time=False).figures()
    assert math.isnan(figures["output_tok_s"])
    assert figures["tpot_mean"] == pytest.approx(1.0)
