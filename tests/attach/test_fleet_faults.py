"""The fleet's faults, each one line and the session goes on: Prometheus unreachable, a URL that is
not Prometheus, 401 without credentials and with wrong ones (Prometheus' own basic auth through
--web.config.file), a PromQL error (Prometheus' own limit on the samples a query loads) said once
with its query, Prometheus restarting mid-session, a replica going down and coming back; the
credentials never printed, logged or recorded."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import queue
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from benchmarks.common.deadline import Deadline
from monitors.events import EngineError, EngineReady, FleetSample, LeverRefused
from monitors.prometheus import QUERY, UNAUTHORIZED, Auth, Prometheus, PrometheusError
from tests.helpers.llama_server import LlamaServer
from tests.helpers.prometheus import PrometheusServer, free_port, group
from tui_app.attach.client import AttachConfig
from tui_app.attach.fleet import NO_REPLICA, FleetConfig, FleetWatcher, _serve
from tui_app.requests import Run, RunRequest, Shutdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER, PASSWORD = "tokentop", "fleet-test-password"
# `htpasswd -nbB tokentop fleet-test-password` (Debian's apache2-utils): Prometheus takes bcrypt hashes only.
WEB_CONFIG = f"basic_auth_users:\n  {USER}: $2y$05$KE9ViAseAygeV7onEvTOOut7NvGFcGX0iUKg5nJw0dcDtsA0yg8sC\n"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}


def tokentop(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui_app", *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=60)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_unreachable_and_not_prometheus_are_one_line_each(llama_server):
    line = one_line(tokentop("attach", "--prometheus", "http://127.0.0.1:1", "--no-tui", "--once", "--no-record"))
    assert line == "tokentop: cannot reach Prometheus at 127.0.0.1:1: connection refused (is it running, on this port?)"
    line = one_line(tokentop("attach", "--prometheus", llama_server.url, "--no-tui", "--once", "--no-record"))
    assert f"127.0.0.1:{llama_server.port} is not a Prometheus HTTP API: GET /api/v1/status/buildinfo answered 404" in line


@pytest.fixture
def guarded(tmp_path, llama_server, second_llama):
    """A second real Prometheus behind basic auth that lets a query load at most 8 samples: `up`
    and the gauges fit, a rate over six or more scrapes of two replicas does not."""
    from tests.helpers.prometheus import unavailable

    if unavailable():
        pytest.skip(unavailable())
    prom = PrometheusServer(str(tmp_path / "guarded"), web_config=WEB_CONFIG, args=("--query.max-samples=8",))
    prom.set_targets("llama", [group("llama", f"127.0.0.1:{s.port}") for s in (llama_server, second_llama)])
    prom.wait_up("llama", 2, headers=BASIC)
    time.sleep(4)
    yield prom
    prom.close()


async def test_credentials_promql_errors_and_a_restart(guarded, tmp_path, monkeypatch):
    monkeypatch.setenv("TT_WRONG", "tokentop:not-the-password")
    monkeypatch.setenv("TT_TOKEN", "a-bearer-token-prometheus-does-not-take")
    monkeypatch.setenv("TT_BASIC", f"{USER}:{PASSWORD}")
    for auth, want in (
        (Auth(), "it wants credentials: name the variable that holds them, --prometheus-token-env VAR"),
        (Auth(basic_env="TT_WRONG"), "the credentials in $TT_WRONG were refused"),
        (Auth(token_env="TT_TOKEN"), "the credentials in $TT_TOKEN were refused"),
    ):
        prom = Prometheus(guarded.url, auth)
        with pytest.raises(PrometheusError) as err:
            await prom.version()
        await prom.aclose()
        assert err.value.kind == UNAUTHORIZED and f"Prometheus at 127.0.0.1:{guarded.port} answered 401: {want}" in str(err.value)
        assert "not-the-password" not in str(err.value) and "a-bearer-token" not in str(err.value)

    events: list = []
    watcher = FleetWatcher(FleetConfig(guarded.url, match='{job="llama"}', basic_env="TT_BASIC", window_s=10, backfill_s=0), events.append)
    try:
        await watcher.start()
        first = await watcher.refresh()
        assert first is not None and len(first.rows) == 2
        refused = [n for n in first.notes if "query processing would load too many samples" in n]
        assert {n.split("(the query for ", 1)[1].split(":", 1)[0] for n in refused} >= {"gen_tps", "prompt_tps", "fleet", "the leak sentinel"}
        assert all("rate(" in n for n in refused)  # each with its query
        assert all(r["running"] == 0 for r in first.rows)  # the queries that fit go on
        second = await watcher.refresh()
        assert second is not None and second.notes == []  # said once

        guarded.stop()
        down = await watcher.refresh()
        again = await watcher.refresh()
        said = [e for e in events if isinstance(e, FleetSample) and e.error]
        assert down is None and again is None and len(said) == 1
        assert said[0].error == f"cannot reach Prometheus at 127.0.0.1:{guarded.port}: connection refused (is it running, on this port?)"
        guarded.start()
        for _ in range(50):
            back = await watcher.refresh()
            if back is not None:
                break
            await asyncio.sleep(0.2)
        assert back is not None and back.notes[0] == f"Prometheus at {guarded.url} answers again" and len(back.rows) == 2
    finally:
        await watcher.aclose()

    # The headless command: its output and its recording hold no credential.
    recording = tmp_path / "fleet.jsonl"
    options = ("--prometheus-basic-env", "TT_BASIC", "--match", '{job="llama"}', "--no-tui", "--once", "--record", str(recording))
    r = tokentop("attach", "--prometheus", guarded.url, *options)
    assert r.returncode == 0, r.stderr
    assert "127.0.0.1" in r.stdout and "fleet" in r.stdout
    for text in (r.stdout, r.stderr, recording.read_text()):
        assert PASSWORD not in text and base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode() not in text


async def test_a_replica_going_down_and_coming_back(prometheus):
    port = free_port()
    flaky = LlamaServer("--port", str(port))
    prometheus.set_targets("flaky", [group("flaky", f"127.0.0.1:{port}")])
    events: list = []
    watcher = FleetWatcher(FleetConfig(prometheus.url, match='{job="flaky"}', window_s=10, backfill_s=0), events.append)
    try:
        prometheus.wait_up("flaky", 1)
        await watcher.start()
        up = await watcher.refresh()
        assert up is not None and [r["up"] for r in up.rows] == [True]
        flaky.kill()
        killed = time.time()
        for _ in range(50):
            down = await watcher.refresh()
            if down is not None and down.rows and down.rows[0]["up"] is False:
                break
            await asyncio.sleep(0.2)
        row = down.rows[0]
        assert row["marks"] == ["down"] and killed <= row["since"] <= killed + 5
        assert "connection refused" in row["error"]
        clock = time.strftime("%H:%M:%S", time.localtime(row["since"]))
        assert down.notes == [f"127.0.0.1:{port} (flaky) down at {clock}: {row['error']}"]
        flaky = LlamaServer("--port", str(port))
        for _ in range(100):
            back = await watcher.refresh()
            if back is not None and back.rows[0]["up"]:
                break
            await asyncio.sleep(0.2)
        assert back.rows[0]["marks"] == [] and back.rows[0]["since"] > row["since"]
        took, clock = back.rows[0]["since"] - row["since"], time.strftime("%H:%M:%S", time.localtime(back.rows[0]["since"]))
        assert back.notes == [f"127.0.0.1:{port} (flaky) up again at {clock} after {took:.0f} s down"]
        prometheus.set_targets("flaky", [])  # a replica gone for good (a deleted pod): nothing kept of it
        for _ in range(50):
            gone = await watcher.refresh()
            if gone is not None and not gone.rows:
                break
            await asyncio.sleep(0.2)
        assert gone.rows == [] and watcher.fleet.known == {} and watcher.fleet.states == {}
    finally:
        await watcher.aclose()
        prometheus.set_targets("flaky", [])
        flaky.close()


async def first(got: list, match, timeout: float = 30.0):
    deadline = Deadline(timeout)
    while not deadline.passed():
        if found := [ev for ev in got if match(ev)]:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {deadline.seconds} s (longest gap {deadline.longest:.1f} s): {[type(ev).__name__ for ev in got]}")


@contextlib.asynccontextmanager
async def fleet_client(cfg: FleetConfig):
    """The fleet client's loop in this process: its events (batches flattened) and its command
    queue. Shut down however the test ends: a thread of it waits on the queue, and would hold
    the event loop's close (and the test) until it reads Shutdown."""
    got: list = []
    commands: queue.Queue = queue.Queue()
    serving = asyncio.create_task(_serve(cfg, commands, SimpleNamespace(put=got.extend)))
    try:
        yield got, commands
    finally:
        commands.put(Shutdown())
        await asyncio.wait_for(serving, 30)


async def test_runs_wait_for_a_replica_prometheus_finds_late_and_give_up_with_the_reason(prometheus, llama_server):
    """A rolling restart, or a replica whose scrape failed once: no replica to run on at the start is
    not the end. The fleet client looks again, says so, refuses a run meanwhile with the reason,
    and runs on the replica once Prometheus finds it; only after find_s does it give up."""
    template = AttachConfig(url="http://127.0.0.1", metrics_hz=0)
    cfg = FleetConfig(prometheus.url, match='{job="late"}', window_s=10, every_s=1, backfill_s=0, leak_span_s=0, template=template, find_s=120)
    try:
        async with fleet_client(cfg) as (got, commands):
            looking = await first(got, lambda ev: isinstance(ev, EngineError))
            assert looking.message == f"{NO_REPLICA} yet: looking again every 1 s for 120 s" and not looking.fatal
            commands.put(Run(RunRequest(max_new_tokens=4)))
            refused = await first(got, lambda ev: isinstance(ev, LeverRefused))
            assert refused.lever == "run" and refused.reason == f"{NO_REPLICA} yet (looking until one does)"
            prometheus.set_targets("late", [group("late", f"127.0.0.1:{llama_server.port}")])
            ready = await first(got, lambda ev: isinstance(ev, EngineReady) and ev.server is not None, timeout=60)
            assert f":{llama_server.port}" in ready.server["url"]
            assert [ev for ev in got if isinstance(ev, EngineError)] == [looking]
    finally:
        prometheus.set_targets("late", [])
    async with fleet_client(replace(cfg, match='{job="nowhere"}', find_s=2)) as (got, _):
        fatal = await first(got, lambda ev: isinstance(ev, EngineError) and ev.fatal)
        assert fatal.message == f"{NO_REPLICA} within 2 s: give the URL runs go to (a router or one replica), or --watch"


async def test_a_promql_error_names_its_query(prometheus):
    """A query Prometheus cannot parse is a QUERY refusal that keeps its text (the line the
    watcher says names it)."""
    prom = Prometheus(prometheus.url)
    try:
        with pytest.raises(PrometheusError) as err:
            await prom.query("rate(up[5m]")
        assert err.value.kind == QUERY and err.value.query == "rate(up[5m]" and "parse error" in str(err.value)
    finally:
        await prom.aclose()
