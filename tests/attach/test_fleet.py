"""The fleet through a real Prometheus (Debian's, one for the session: tests/helpers/prometheus.py)
scraping two real llama.cpp servers every second: each replica's row against that replica's own
/metrics read directly at the same moment, the fleet's row against its replicas, a router's and a
DCGM exporter's metric texts (stand-ins: tests/helpers/standins.py) as targets of the same
Prometheus, the fixed number of queries per refresh, and the backfill against instant queries."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time

import httpx
import pytest

from monitors.fleet import Fleet, Selector
from monitors.prometheus import Prometheus
from monitors.servers import parse_metrics
from tests.helpers.prometheus import StandIns, group
from tests.helpers.standins import dcgm, router, vllm_replica

WINDOW = 10.0
LLAMA = Selector('{job="llama"}')


def total(url: str, name: str) -> float:
    return sum(v for _, v in parse_metrics(httpx.get(url + "/metrics", timeout=5).text).get(name, ()))


def generate(url: str, tokens: int, streams: int = 1) -> list[threading.Thread]:
    """`streams` requests of `tokens` tokens each, in threads, started now."""

    def one():
        httpx.post(url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True}, timeout=120)

    threads = [threading.Thread(target=one) for _ in range(streams)]
    for t in threads:
        t.start()
    return threads


@contextlib.asynccontextmanager
async def fleet_of(prom_server, selector: Selector = LLAMA, **options):
    prom = Prometheus(prom_server.url, **options)
    try:
        yield Fleet(prom, selector, WINDOW)
    finally:
        await prom.aclose()


def by_port(rows: list[dict]) -> dict[int, dict]:
    return {int(r["instance"].rsplit(":", 1)[1]): r for r in rows if not r["server"]}


@pytest.mark.serial
async def test_rows_against_each_replicas_own_metrics(prometheus, llama_server, second_llama):
    a, b = llama_server, second_llama
    async with fleet_of(prometheus) as fleet:
        # Gauges: one stream on a, two on b, long enough to hold still while both are read.
        busy = generate(a.url, 250) + generate(b.url, 250, streams=2)
        for _ in range(50):
            _, rows, _, _ = await fleet.refresh()
            seen = by_port(rows)
            if seen[a.port].get("running") == 1 and seen[b.port].get("running") == 2:
                break
            await asyncio.sleep(0.2)
        # Each server's own /metrics, and Prometheus asked about that same instant.
        at = time.time()
        direct = {s.port: parse_metrics(httpx.get(s.url + "/metrics", timeout=5).text) for s in (a, b)}
        _, rows, figures, _ = await fleet.refresh(at=at)
        seen = by_port(rows)
        for port, want in ((a.port, 1), (b.port, 2)):
            row = seen[port]
            assert row["family"] == "llama.cpp" and row["up"] is True and row["marks"] == []
            assert row["running"] == direct[port]["llamacpp:requests_processing"][0][1] == want
            assert row["waiting"] == direct[port]["llamacpp:requests_deferred"][0][1] == 0
        assert figures["running"] == 3 == sum(r["running"] for r in rows)  # the fleet's row: its replicas' sum
        for t in busy:
            t.join()

        # Counter rates: short requests back to back on a (llama.cpp counts a request's tokens when
        # it ends), a's counters read directly four times a second through more than one window.
        polls: list[tuple[float, float, float]] = []
        stop = time.monotonic() + WINDOW + 3

        def load():
            while time.monotonic() < stop:
                for t in generate(a.url, 16):
                    t.join()

        loader = threading.Thread(target=load)
        loader.start()
        while loader.is_alive():
            polls.append((time.time(), total(a.url, "llamacpp:tokens_predicted_total"), total(a.url, "llamacpp:prompt_tokens_total")))
            await asyncio.sleep(0.25)
        ts, rows, figures, _ = await fleet.refresh(at=polls[-1][0])
    row = by_port(rows)[a.port]

    def direct_rate(col: int) -> tuple[float, float]:
        """Δ over the window ÷ the window, and the most the counter grew within one scrape (1 s)."""
        start = next(p for p in polls if p[0] >= ts - WINDOW)
        rate = (polls[-1][col] - start[col]) / (polls[-1][0] - start[0])
        step = max(q[col] - p[col] for p in polls for q in polls if 0 <= q[0] - p[0] <= 1.0)
        return rate, step

    for key, col in (("gen_tps", 1), ("prompt_tps", 2)):
        rate, step = direct_rate(col)
        assert rate > 0
        # Prometheus' samples of the window's ends are up to a scrape from the direct reads.
        assert abs(row[key] - rate) <= 2 * step / WINDOW + 0.5, (key, row[key], rate, step)
    assert figures["gen_tps"] == pytest.approx(sum(r.get("gen_tps") or 0 for r in rows))


async def test_backfill_is_the_fleet_row_prometheus_had(prometheus):
    # Five seconds of history at least: this worker's Prometheus may have started just now.
    await asyncio.sleep(max(0.0, prometheus.llama_up_at + 6 - time.time()))
    async with fleet_of(prometheus) as fleet:
        end = time.time() - 1
        past = await fleet.backfill(span_s=30, step_s=1, end=end)
        assert len(past) >= 5 and past[-1][0] == pytest.approx(end, abs=0.01)  # as much of 30 s as Prometheus has
        assert all(b[0] - a[0] == pytest.approx(1.0) for a, b in itertools.pairwise(past))
        t, figures = past[-5]
        _, rows, now, _ = await fleet.refresh(at=t)
        for key in ("running", "waiting", "gen_tps", "prompt_tps"):
            assert figures.get(key) == pytest.approx(now.get(key)), key
        assert {r["up"] for r in rows} == {True} and all(r["since"] is None for r in rows)  # up all through the span


async def test_queries_per_refresh_do_not_grow_with_the_replicas(prometheus):
    standins = StandIns()
    try:
        async with fleet_of(prometheus, Selector('{job=~"llama|many"}')) as fleet:
            await fleet.refresh()
            before = dict(fleet.prom.requests)
            _, rows, _, _ = await fleet.refresh()
            two = {k: v - before.get(k, 0) for k, v in fleet.prom.requests.items()}
            busy = 0.25  # a request every 0.25 s per replica
            for i in range(40):
                standins.texts[f"/r{i}/metrics"] = vllm_replica(i, every_s=busy)
            # The hot spots: a full KV cache, waiting while replica-7 idles, a TTFT far from the
            # fleet's, and two data-parallel engines behind one target. The slow replica's one
            # request every 3 s is 0.2 % of the fleet's 160 a second, and stays under the 1 % that
            # would lift the fleet's p99 into its bucket even when rate() reads its window's edges
            # at their worst (4 requests in 9 s) and some replicas miss a scrape.
            standins.texts["/r5/metrics"] = vllm_replica(5, kv=0.97, every_s=busy)
            standins.texts["/r6/metrics"] = vllm_replica(6, waiting=2, every_s=busy)
            standins.texts["/r7/metrics"] = vllm_replica(7, running=0, every_s=busy)
            standins.texts["/r8/metrics"] = vllm_replica(8, ttft_s=0.5, every_s=3)
            standins.texts["/r9/metrics"] = vllm_replica(9, engines=2, every_s=busy)
            prometheus.set_targets("many", [group("many", standins.address, instance=f"replica-{i}", path=f"/r{i}/metrics") for i in range(40)])
            prometheus.wait_up("many", 40)
            before = dict(fleet.prom.requests)
            _, rows, figures, _ = await fleet.refresh()
            many = {k: v - before.get(k, 0) for k, v in fleet.prom.requests.items()}
            for _ in range(30):  # until every replica's window holds its requests (two scrapes of each)
                if all((r.get("ttft") or {}).get("p99") is not None for r in rows if r["family"] == "vLLM"):
                    break
                await asyncio.sleep(0.5)
                _, rows, figures, _ = await fleet.refresh()
        assert two == many == {"/api/v1/query": len(fleet.queries) + 1}
        assert len([r for r in rows if r["family"] == "vLLM"]) == 41 and len([r for r in rows if r["family"] == "llama.cpp"]) == 2
        at = {(r["instance"], r["engine"]): r for r in rows}
        replica = at["replica-3", "0"]
        assert replica["running"] == 2 and replica["kv_usage"] == pytest.approx(0.4) and replica["marks"] == []
        assert at["replica-9", "0"]["running"] == at["replica-9", "1"]["running"] == 2
        # Requests whose TTFT is 50 ms: their bucket (40-60 ms) holds both quantiles.
        assert 0.04 <= replica["ttft"]["p50"] <= 0.06 and 0.04 <= figures["ttft"]["p99"] <= 0.06
        assert at["replica-5", "0"]["marks"] == ["KV ≥ 95%"]
        assert at["replica-6", "0"]["marks"] == ["waiting while others idle"]
        (slow,) = at["replica-8", "0"]["marks"]
        assert slow.startswith("TTFT p99 ") and slow.endswith("× fleet") and 0.25 <= at["replica-8", "0"]["ttft"]["p99"] <= 0.5
        want = 2 * 39 + 2 + 0 + sum(r.get("running") or 0 for r in rows if r["family"] == "llama.cpp")  # replica-9's two engines, replica-7 idle
        assert figures["running"] == pytest.approx(want)
    finally:
        prometheus.set_targets("many", [])
        standins.close()


@pytest.mark.serial
async def test_a_router_and_a_dcgm_exporter(prometheus, llama_server, second_llama):
    standins = StandIns()
    backends = {f"http://127.0.0.1:{llama_server.port}": (3, 1), f"http://127.0.0.1:{second_llama.port}": (0, 0)}
    standins.texts["/router/metrics"] = router(backends)
    standins.texts["/dcgm/metrics"] = dcgm([300.0, 200.0])
    try:
        prometheus.set_targets("router", [group("router", standins.address, instance="router:8001", path="/router/metrics")])
        prometheus.set_targets("dcgm", [group("dcgm", standins.address, instance="node-a:9400", path="/dcgm/metrics")])
        prometheus.wait_up("router", 1)
        prometheus.wait_up("dcgm", 1)
        async with fleet_of(prometheus, Selector('{job=~"llama|router"}')) as fleet:
            await asyncio.sleep(WINDOW)  # a window without tokens of other tests
            before = sum(total(s.url, "llamacpp:tokens_predicted_total") for s in (llama_server, second_llama))
            threads = generate(llama_server.url, 16) + generate(second_llama.url, 16)
            for t in threads:
                t.join()
            after = sum(total(s.url, "llamacpp:tokens_predicted_total") for s in (llama_server, second_llama))
            await asyncio.sleep(3)  # two scrapes
            _, rows, figures, _ = await fleet.refresh()
        via = {r["server"]: r for r in rows if r["server"]}
        assert set(via) == set(backends)
        for url, (running, waiting) in backends.items():
            assert via[url]["running"] == running and via[url]["waiting"] == waiting and via[url]["family"] == "vLLM"
            assert via[url]["instance"] == "router:8001"
        # The router counts its backends' requests again: the fleet's row leaves its series out.
        assert figures["running"] == sum(r.get("running") or 0 for r in rows if not r["server"])
        assert figures["power_w"] == 500.0 and figures["gpus"] == 2
        # The stand-in's counter grows at exactly 500 W: increase() over the window, within a scrape.
        assert figures["energy_j"] == pytest.approx(500 * WINDOW, abs=500 * 1.0)
        # increase() stretches what its samples saw to the whole window: by up to a scrape of 1 s in 10.
        assert after - before == 32 <= figures["gen_tokens"] <= 32 * WINDOW / (WINDOW - 1.5)
        assert figures["j_per_token"] == pytest.approx(figures["energy_j"] / figures["gen_tokens"])
    finally:
        prometheus.set_targets("router", [], wait=False)
        prometheus.set_targets("dcgm", [])
        standins.close()


async def test_a_selector_that_matches_nothing_says_what_prometheus_has(prometheus):
    from tui_app.attach.fleet import FleetConfig, FleetWatcher

    events: list = []
    watcher = FleetWatcher(FleetConfig(prometheus.url, match='{job="vllm"}', window_s=WINDOW, backfill_s=0), events.append)
    try:
        await watcher.start()
        first = await watcher.refresh()
        second = await watcher.refresh()
    finally:
        await watcher.aclose()
    assert first is not None and first.rows == []
    assert first.error.startswith('no replica matches {job="vllm"}: Prometheus scrapes ') and 'job="llama" (2 targets, 2 up)' in first.error
    assert second is not None and second.error == ""  # said once


def test_headless_prints_the_table_or_json_once(prometheus, llama_server, second_llama):
    """`attach --prometheus URL --no-tui --once [-o json]` (TOKENTOP_PROMETHEUS names it too)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TOKENTOP_PROMETHEUS": prometheus.url}
    cmd = [sys.executable, "-m", "tui_app", "attach", "--match", '{job="llama"}', "--no-tui", "--once", "--no-record"]
    table = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("Prometheus 2.42") and '{job="llama"}' in lines[0]
    assert any(line.startswith(f"127.0.0.1:{llama_server.port}  llama.cpp  up") for line in lines)
    assert lines[-1].startswith("fleet") and "2/2 up" in lines[-1]
    out = subprocess.run([*cmd, "-o", "json"], capture_output=True, text=True, env=env, timeout=60)
    (obj,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert obj["prometheus"] == prometheus.url and obj["selector"] == '{job="llama"}'
    assert sorted(r["instance"] for r in obj["rows"]) == sorted(f"127.0.0.1:{s.port}" for s in (llama_server, second_llama))
    assert obj["fleet"]["running"] == sum(r["running"] for r in obj["rows"])
    helped = " ".join(subprocess.run([sys.executable, "-m", "tui_app", "attach", "--help"], capture_output=True, text=True, timeout=60).stdout.split())
    assert "11 queries each --every" in helped and "about concurrency ÷ (run seconds + 0.3) requests a second" in helped  # what tokentop's own runs add
