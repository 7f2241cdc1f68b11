"""`tokentop bench --endpoint`: the serving benchmark against the real llama.cpp server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tui_app.commands.serving import parse_slo
from tui_app.commands.serving.workloads import arrivals
from tui_app.core.options import UsageError


def bench(tmp_path, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tui_app", "bench", *args, "-o", "json", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads((tmp_path / "b.json").read_text())


def test_a_closed_loop_sweep_has_every_field_and_goodput_is_the_requests_that_met_the_slo(llama_server, tmp_path):
    data = bench(
        tmp_path,
        "--endpoint",
        llama_server.url,
        "--label",
        "L",
        "--lengths",
        "24:6",
        "--concurrency",
        "1,2",
        "--repeats",
        "2",
        "--warmup",
        "0",
        "--slo",
        "ttft=400ms,itl=40ms",
    )
    assert [(r["server"], r["load"], r["requests"]) for r in data["results"]] == [("L", "c1", 2), ("L", "c2", 4)]
    for row, reqs in zip(data["results"], data["requests"], strict=True):
        assert row["prompt_tokens"] == 24 and row["server_prompt_tokens_mean"] == 24  # cut by the server's own tokenizer
        for name in ("ttft", "itl", "tpot", "e2e"):
            for stat in ("mean", "std", "p50", "p90", "p95", "p99"):
                assert row[f"{name}_{stat}_s"] is not None, f"{name}_{stat}_s"
        for key in ("output_tok_s", "requests_s", "goodput_requests_s", "server_running_peak", "server_waiting_peak"):
            assert row[key] is not None, key
        assert row["output_tok_s"] == pytest.approx(sum(r["tokens"] for r in reqs) / row["wall_s"])
        good = [r for r in reqs if r["ok"] and r["ttft_s"] <= 0.4 and sum(r["itl_s"]) / len(r["itl_s"]) <= 0.04]
        assert row["good"] == len(good)
        assert row["goodput_requests_s"] == pytest.approx(len(good) / row["wall_s"])
        assert all(r["tokens"] == 6 and len(r["itl_s"]) == 5 for r in reqs)
        tpot = [(r["e2e_s"] - r["ttft_s"]) / 5 for r in reqs]
        assert row["tpot_mean_s"] == pytest.approx(sum(tpot) / len(tpot))
    assert data["results"][1]["server_running_peak"] >= 1


@pytest.mark.serial
def test_open_loop_arrivals_have_the_asked_mean_rate(llama_server, tmp_path):
    args = ("--lengths", "8:1", "--rate", "40", "--requests", "200", "--repeats", "1", "--warmup", "0", "--seed-arrivals", "7")
    data = bench(tmp_path, "--endpoint", llama_server.url, *args)
    sent = [r["sent_s"] for r in data["requests"][0]]
    assert len(sent) == 200 and data["results"][0]["load"] == "r40/s"
    rate = (len(sent) - 1) / (sent[-1] - sent[0])
    assert rate == pytest.approx(40, rel=0.10)
    # The schedule itself, without the server: the same seed, the same gaps.
    times = arrivals(40, 1.0, 7, count=200)
    assert sent[-1] - sent[0] == pytest.approx(times[-1] - times[0], rel=0.10)


def test_slo_parsing():
    assert parse_slo("ttft=500ms, itl=0.05s,e2e=2") == {"ttft": 0.5, "itl": 0.05, "e2e": 2.0}
    for bad in ("ttfb=1s", "ttft=", "ttft=fast", "itl=-1ms"):
        with pytest.raises(UsageError):
            parse_slo(bad)
