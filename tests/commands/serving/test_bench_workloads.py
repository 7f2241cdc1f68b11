"""`tokentop bench --endpoint` with workloads like production (ShareGPT conversations, a Mooncake
trace), rounds with their intervals, two servers' ratios and the SLO's refusals, on real llama.cpp
servers; the headroom sweep before a one-slot server of fixed pace; the file readers' refusals and
the statistics against scipy's."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys

import pytest

from tests.helpers.llama_server import LlamaServer
from tests.helpers.sse_standin import SseStandIn
from tui_app.commands.serving import sweep, workloads
from tui_app.core import stats
from tui_app.core.options import UsageError


def run(tmp_path, *args: str, ok: bool = True) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = subprocess.run(
        [sys.executable, "-m", "tui_app", "bench", *args, "-o", "json", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300
    )
    if ok:
        assert out.returncode == 0, out.stderr[-3000:]
    path = tmp_path / "b.json"
    return out, json.loads(path.read_text()) if path.exists() else None


def report(tmp_path) -> str:
    """`tokentop report` of the bench's JSON: its HTML page."""
    out = subprocess.run([sys.executable, "-m", "tui_app", "report", str(tmp_path / "b.json"), "-o", str(tmp_path / "r.html")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return (tmp_path / "r.html").read_text()


@pytest.fixture(scope="module")
def one_slot():
    """llama.cpp with one slot and one thread: requests queue, so load has a limit to find."""
    server = LlamaServer("--slots", "1")
    yield server
    server.close()


# ------------------------------------------------------------------ statistics


def test_the_bootstrap_interval_is_scipys_percentile_interval():
    from scipy.stats import bootstrap

    rng = random.Random(3)
    data = [rng.lognormvariate(0, 0.5) for _ in range(40)]
    ours = stats.interval(data, lambda xs: sum(xs) / len(xs), resamples=4000)
    theirs = bootstrap((data,), lambda x: sum(x) / len(x), vectorized=False, method="percentile", n_resamples=4000, random_state=1).confidence_interval
    width = theirs.high - theirs.low
    assert ours is not None
    assert ours[0] == pytest.approx(theirs.low, abs=0.05 * width) and ours[1] == pytest.approx(theirs.high, abs=0.05 * width)
    assert stats.interval(data[:1], lambda xs: xs[0]) is None  # one round: nothing to resample


def test_a_paired_ratio_cancels_what_the_pairs_share():
    rng = random.Random(5)
    load = [rng.uniform(0.5, 2.0) for _ in range(8)]  # the machine's moment, shared by round k of both
    a = [[x] for x in load]
    b = [[1.3 * x] for x in load]
    point, ci = stats.paired_ratio(a, b, lambda rounds: sum(r[0] for r in rounds))
    assert point == pytest.approx(1.3) and ci == pytest.approx((1.3, 1.3))


def test_arrivals_follow_vllms_definitions():
    even = workloads.arrivals(4.0, math.inf, 0, count=5)
    assert even == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])
    gaps = [b - a for a, b in zip([0.0, *workloads.arrivals(10.0, 4.0, 1, count=4000)], workloads.arrivals(10.0, 4.0, 1, count=4000), strict=False)]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert mean == pytest.approx(0.1, rel=0.05) and cv == pytest.approx(1 / math.sqrt(4.0), rel=0.1)  # gamma of shape 4: CV 1/√4


# ------------------------------------------------------------------ the files


def test_the_shipped_samples_read_and_a_malformed_line_is_named(tmp_path):
    convs, unusable = workloads.read_sharegpt("sample", multi_turn=True)
    assert unusable == 0 and len(convs) == 6 and max(len(pairs) for _, pairs, _ in convs) == 3
    assert convs[1][2] == "You are a patient gardening helper."  # a system turn goes before the first prompt
    first_only, _ = workloads.read_sharegpt("sample", multi_turn=False)
    assert all(len(pairs) == 1 for _, pairs, _ in first_only)
    trace = workloads.read_trace("sample", workloads.SAMPLE_BLOCK)
    assert len(trace) == 12 and trace[0].at_s == 0 and trace[-1].at_s == pytest.approx(7.0)

    bad = tmp_path / "bad.json"
    good = '{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}'
    bad.write_text(f'[\n {good},\n {{"conversations": [{{"from": "human", "value": 3}}]}}\n]\n')
    with pytest.raises(UsageError, match=r"line 3: field 'conversations\[0\]'"):
        workloads.read_sharegpt(str(bad), multi_turn=False)
    bad.write_text('[\n {"conversations": []},\n {"conversations": [{"from": "robot", "value": "x"}]}]')
    with pytest.raises(UsageError, match=r"line 3: field 'conversations\[0\].from' is 'robot'"):
        workloads.read_sharegpt(str(bad), multi_turn=False)
    bad.write_text('[{"conversations": [}]')
    with pytest.raises(UsageError, match=r"line 1 column \d+: not JSON"):
        workloads.read_sharegpt(str(bad), multi_turn=False)

    lines = (
        tmp_path / "t.jsonl",
        [
            (
                '{"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [1, 2]}\n{"timestamp": 5, "input_length": 20, "hash_ids": [1, 2]}',
                r"line 2: field 'output_length' is missing",
            ),
            ('{"timestamp": 0, "input_length": "20", "output_length": 4, "hash_ids": [1, 2]}', r"line 1: field 'input_length' is \"20\": expected a number"),
            (
                '{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2]}',
                r"line 1: field 'hash_ids' has 2 ids, but input_length 40 is 3 block\(s\) of 16",
            ),
            ("\n\nnot json", r"line 3 column 1: not JSON"),
        ],
    )
    path, cases = lines
    for text, message in cases:
        path.write_text(text)
        with pytest.raises(UsageError, match=message):
            workloads.read_trace(str(path), 16)


def test_a_sweep_bound_that_is_not_a_number_is_one_line(tmp_path):
    assert sweep.parse_sweep("1:4:1") == [1.0, 2.0, 3.0, 4.0]
    assert len(sweep.parse_sweep("0.5:4")) == 8
    for spec, message in (("1:fast", "'fast' is not a number"), ("4:1", "0 < LO ≤ HI"), ("1", "expected LO:HI"), ("1:2:0", "STEP must be more than 0")):
        with pytest.raises(UsageError, match=message):
            sweep.parse_sweep(spec)
    out, _ = run(tmp_path, "--endpoint", "http://127.0.0.1:9", "--sweep", "1:x", "--slo", "ttft=1s", ok=False)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == "tokentop: --sweep '1:x': 'x' is not a number (LO:HI[:STEP] in requests/s)"
    out, _ = run(tmp_path, "--endpoint", "http://127.0.0.1:9", "--sweep", "1:2", ok=False)
    assert out.returncode == 2 and "give --slo" in out.stderr


# ------------------------------------------------------------------ on llama.cpp


def test_multi_turn_conversations_carry_their_history_and_the_cache_shows_it(llama_server, tmp_path):
    out, data = run(
        tmp_path,
        "--endpoint",
        llama_server.url,
        "--dataset",
        "sharegpt",
        "sample",
        "--multi-turn",
        "--concurrency",
        "2",
        "--output-len",
        "4",
        "--warmup",
        "0",
        "--repeats",
        "1",
    )
    reqs = data["requests"][0]
    convs, _ = workloads.read_sharegpt("sample", multi_turn=True)
    assert len(reqs) == sum(len(pairs) for _, pairs, _ in convs) == 11 and all(r["ok"] and r["tokens"] == 4 for r in reqs)
    by_conv: dict = {}
    for r in reqs:
        by_conv.setdefault(r["conversation"], []).append(r)
    for turns in by_conv.values():
        turns.sort(key=lambda r: r["turn"])
        for before, after in itertools.pairwise(turns):
            # The later turn's prompt is the earlier prompt, its 4-token reply and the new text.
            assert after["prompt_tokens"] > before["prompt_tokens"] + before["tokens"]
            assert after["cached_tokens"] >= before["prompt_tokens"]  # the server had the conversation so far
    row = data["results"][0]
    cached = [r["cached_tokens"] for r in reqs]
    assert row["server_cached_tokens_mean"] == pytest.approx(sum(cached) / len(cached))
    shown = f"{row['prompt_tokens']} ({round(row['server_cached_tokens_mean'])} cached)→4"
    assert shown in out.stdout
    assert shown in report(tmp_path)


@pytest.mark.serial
def test_the_sample_trace_replays_on_its_own_schedule_with_its_prompt_lengths(llama_server, tmp_path):
    _, data = run(tmp_path, "--endpoint", llama_server.url, "--trace", "sample", "--trace-speed", "4", "--output-len", "2", "--warmup", "0", "--repeats", "1")
    trace = workloads.read_trace("sample", workloads.SAMPLE_BLOCK)
    reqs = data["requests"][0]
    assert data["results"][0]["load"] == "trace ×4" and len(reqs) == len(trace)
    span = trace[-1].at_s / 4
    for r, planned in zip(reqs, trace, strict=True):
        assert abs(r["sent_s"] - planned.at_s / 4) <= 0.05 * span, (r["sent_s"], planned.at_s / 4)
        assert r["prompt_tokens"] == planned.prompt_tokens  # exact lengths, by the server's own count
        assert r["late_s"] is not None and r["late_s"] < 0.05 * span
    # Requests that share leading hash ids share that prefix, token for token: the server finds it cached
    # (where its slot is free to reuse); a request whose first block is its own finds nothing.
    first = {}
    for r, planned in zip(reqs, trace, strict=True):
        first.setdefault(planned.hash_ids[0], []).append(r["cached_tokens"])
    assert any(c >= 2 * workloads.SAMPLE_BLOCK - 1 for c in first[0][1:] + first[10][1:]), first
    assert all(c < workloads.SAMPLE_BLOCK for h, cs in first.items() if len(cs) == 1 for c in cs), first


def test_a_trace_longer_than_the_context_is_named_then_refused_or_skipped(llama_server, tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 12, "output_length": 2, "hash_ids": [7]}\n'
        '{"timestamp": 100, "input_length": 1100, "output_length": 2, "hash_ids": [' + ", ".join(str(i) for i in range(69)) + "]}\n"
    )
    out, _ = run(tmp_path, "--endpoint", llama_server.url, "--trace", str(path), "--trace-block", "16", ok=False)
    assert out.returncode == 2
    assert f"--trace {path}: 1 request(s) exceed the server's context of 1024 tokens: line 2 (1100+2 tokens); --too-long skip leaves them out" in out.stderr
    out, data = run(
        tmp_path, "--endpoint", llama_server.url, "--trace", str(path), "--trace-block", "16", "--too-long", "skip", "--warmup", "0", "--repeats", "1"
    )
    assert "1 request(s) over the server's context of 1024 tokens left out: line 2 (1100+2 tokens)" in out.stderr
    assert [r["prompt_tokens"] for r in data["requests"][0]] == [12]


def test_two_servers_rounds_give_intervals_and_the_ratio_with_its_interval(llama_server, tmp_path):
    other = LlamaServer("--slots", "2")
    try:
        out, data = run(
            tmp_path,
            "--endpoint",
            llama_server.url,
            "--label",
            "A",
            "--endpoint",
            other.url,
            "--label",
            "B",
            "--lengths",
            "12:4",
            "--repeats",
            "3",
            "--warmup",
            "0",
        )
    finally:
        other.close()
    a, b = data["results"]
    for row in (a, b):
        assert row["rounds"] == 3
        for name in ("ttft_p50_s", "output_tok_s"):
            lo, hi = row[f"{name}_ci95"]
            assert lo <= row[name] <= hi
    (ratio,) = data["ratios"]
    assert ratio["server"] == "B" and ratio["base"] == "A"
    assert ratio["output_tok_s_ratio"] == pytest.approx(b["output_tok_s"] / a["output_tok_s"])
    lo, hi = ratio["output_tok_s_ratio_ci95"]
    assert lo <= ratio["output_tok_s_ratio"] <= hi
    assert f"B ÷ A at c1 {a['prompt_tokens']}→4: " in out.stdout and "With 95 % intervals over the rounds" in out.stdout


@pytest.mark.serial
def test_the_sweep_finds_the_headroom_a_direct_run_confirms(tmp_path):
    """Before a server of one slot and fixed pace (the stand-in: a chunk every 20 ms, one request
    streamed at a time, the rest queued in arrival order), so that a queue grows by the load alone.
    On llama.cpp the capacity was a request alone's, taken before the sweep: this machine's pace
    moved 2-4x within seconds (2026-12-02), and a slow spell at the headroom, or a calibration in
    one, decided the test where the sweep did nothing wrong."""
    gap_s, new = 0.02, 8
    service = new * gap_s  # a request alone, first chunk to last: 0.16 s, so 6.25 requests a second
    capacity = 1 / service
    # A TTFT a request alone meets with room (its own is one gap), and that the queue at twice the
    # capacity outgrows from its fifth request on (each waits 0.08 s more than the one before).
    slo = f"ttft={(gap_s + 2 * service) * 1000:.0f}ms"
    # Steps at 0.4 and 2.0 of the capacity: evenly spaced arrivals never queue at the first, pile up at the second.
    lo, step = round(0.4 * capacity, 3), round(1.6 * capacity, 3)
    spec = f"{lo:g}:{lo + 2 * step:g}:{step:g}"
    common = ("--lengths", "16:8", "--burstiness", "inf", "--requests", "12", "--repeats", "1", "--warmup", "0", "--slo", slo)
    server = SseStandIn(gap_ms=gap_s * 1000, slots=1)
    try:
        out, data = run(tmp_path, "--endpoint", server.url, "--sweep", spec, *common)
        (verdict,) = data["sweep"]
        steps = verdict["steps"]
        assert verdict["verdict"] == "found" and verdict["headroom_rate"] == pytest.approx(lo)
        assert [s["passed"] for s in steps] == [True, False]  # the sweep stops at the first step that fails
        assert f"headroom {lo:g} req/s" in out.stdout
        # The step that failed stopped once it could not pass, or once it saw the queue grow.
        assert steps[1]["stopped"] and steps[1]["good"] < 0.9 * steps[1]["planned"]
        page = report(tmp_path)
        assert 'id="headroom-0"' in page and f"The headroom, {lo:g} req/s, is the highest rate that met it" in page
        _, at = run(tmp_path, "--endpoint", server.url, "--rate", f"{lo:g}", *common)
        _, above = run(tmp_path, "--endpoint", server.url, "--rate", f"{lo + step:g}", *common)
    finally:
        server.close()
    assert at["results"][0]["good_fraction"] >= 0.9
    assert above["results"][0]["good_fraction"] < 0.9


def test_an_slo_that_cannot_be_met_is_said_at_the_first_step(one_slot, tmp_path):
    out, data = run(
        tmp_path,
        "--endpoint",
        one_slot.url,
        "--lengths",
        "16:4",
        "--sweep",
        "0.5:2:0.5",
        "--requests",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--slo",
        "ttft=1ms",
        ok=False,
    )
    assert out.returncode == 1
    assert "the SLO (ttft=1ms) is not met even at the first step, 0.5 req/s: 0 of 4 requests met it" in out.stdout
    (verdict,) = data["sweep"]
    assert verdict["verdict"] == "never met" and len(verdict["steps"]) == 1 and verdict["steps"][0]["stopped"].startswith("cannot pass")
