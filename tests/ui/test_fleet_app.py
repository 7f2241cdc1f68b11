"""The TUI on a fleet through the session's real Prometheus (two real llama.cpp servers): the fleet
pane's rows, the past filled at once, --watch sending nothing (checked on the servers' own
counters), runs going to a replica found in Prometheus and `t` moving them; --watch on one server;
the recording carrying the fleet for replay and `tokentop report`."""

from __future__ import annotations

import time

import httpx

from monitors.record import Recorder, read_recording
from monitors.sampler import Sampler
from monitors.servers import parse_metrics
from tests.ui.test_app import APP_SIZE, finished, notes, status_text, until
from tui_app.attach.client import AttachConfig
from tui_app.attach.fleet import FleetConfig
from tui_app.core.session import Session
from tui_app.core.sources import AttachSource, FleetSource, ReplaySource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.fleet_pane import FleetPane
from tui_app.ui.widgets.server_pane import ServerPane


def lines(widget) -> str:
    return "\n".join(strip.text for strip in widget._strips) + f"\n{widget.border_title}\n{widget.border_subtitle}"


def decodes(*servers) -> float:
    """Every llama_decode() call the servers made: any request at all moves it."""
    return sum(v for s in servers for _, v in parse_metrics(httpx.get(s.url + "/metrics", timeout=5).text)["llamacpp:n_decode_total"])


async def test_watching_a_fleet_sends_nothing_and_fills_the_past(prometheus, llama_server, second_llama, tmp_path):
    before = decodes(llama_server, second_llama)
    started = time.time()
    cfg = FleetConfig(prometheus.url, match='{job="llama"}', window_s=10, every_s=1, backfill_s=60, watch=True)
    recording = tmp_path / "fleet.jsonl"
    app = TokentopApp(FleetSource(cfg), None, recorder=Recorder(str(recording)), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        pane = app.query_one(FleetPane)
        await until(pilot, lambda: app.session.fleet is not None and f"127.0.0.1:{second_llama.port}" in lines(pane), timeout=30, what="the fleet's rows")
        text = lines(pane)
        assert f"127.0.0.1:{llama_server.port}  llama.cpp  up" in text and "fleet            2          2/2 up" in text
        assert "fleet — Prometheus 2.42" in text and '{job="llama"}' in text and "tokentop sends nothing (--watch)" in text
        assert "energy: not reported" in text
        # The past at once: Prometheus' own history of the fleet, from before tokentop started.
        assert min(t for t, _ in app.session.fleet_history) < started - 1
        await pilot.press("r")
        await until(pilot, lambda: any("--watch: tokentop sends no request" in n for n in notes(app)), what="r refused")
        await pilot.pause(2.0)
        await pilot.press("q")
    assert decodes(llama_server, second_llama) == before  # not one request of tokentop's own
    events = read_recording(recording).events
    assert any(getattr(e, "backfill", False) and e.ts < started for e in events)
    replayed = Session.from_events(events)
    assert replayed.fleet is not None and replayed.fleet.rows == app.session.fleet.rows
    assert len(replayed.fleet_history) == len(app.session.fleet_history)

    replay = TokentopApp(ReplaySource(events, speed=0), None, fps=8, out_dir=str(tmp_path))
    async with replay.run_test(size=APP_SIZE) as pilot:
        pane = replay.query_one(FleetPane)
        await until(pilot, lambda: f"127.0.0.1:{llama_server.port}  llama.cpp  up" in lines(pane), timeout=10, what="the replayed fleet")
        await pilot.press("q")

    from tui_app.commands.report import build
    from tui_app.commands.report.page import render

    page = render(build(str(recording)))
    assert '<table id="fleet">' in page and f"127.0.0.1:{llama_server.port}" in page and "<h2>Fleet</h2>" in page
    assert f"Prometheus 2.42.0+ds at {prometheus.url}, replicas {{job=&quot;llama&quot;}}, rates over 10 s, tokentop sent nothing (--watch)" in page


async def test_runs_go_to_a_replica_found_in_prometheus_and_t_moves_them(prometheus, llama_server, second_llama, tmp_path):
    template = AttachConfig(url="http://127.0.0.1", metrics_hz=1)
    cfg = FleetConfig(prometheus.url, match='{job="llama"}', window_s=10, every_s=1, backfill_s=0, template=template)
    app = TokentopApp(FleetSource(cfg), RunRequest(max_new_tokens=8, ignore_eos=True), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=60, what="the first run")
        assert set(app.session.servers) == {f"127.0.0.1:{s.port}" for s in (llama_server, second_llama)}
        first = app.session.levers.server
        await pilot.press("t")
        await until(pilot, lambda: app.session.levers.server != first, what="the other replica")
        assert f"t:{app.session.levers.server}" in status_text(app)
        await pilot.press("r")
        await until(pilot, lambda: finished(app) >= 2, timeout=60, what="a run on the other replica")
        runs = [app.session.timer.runs[i].started.levers.server for i in app.session.finished_ids]
        assert runs[0] != runs[1] and set(runs) == set(app.session.servers)
        assert app.query_one(FleetPane).session.fleet is not None
        await pilot.press("q")


async def test_watching_one_server_reads_its_metrics_only(llama_server, tmp_path):
    """And its memory baseline: --watch runs nothing, so the leak detector takes the server's RSS
    each time its own traffic (here another client's requests) ends."""
    import psutil

    from tests.attach.test_fleet import generate

    before = decodes(llama_server)
    source = AttachSource([AttachConfig(url=llama_server.url, metrics_hz=8, watch=True)])
    app = TokentopApp(source, None, sampler=Sampler(hz=8), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        pane = app.query_one(ServerPane)
        await until(pilot, lambda: "llamacpp:requests_processing" in lines(pane), timeout=30, what="the server's figures")
        assert source.pid == llama_server.proc.pid  # the memory pane and the leak detector follow it as before
        assert "l:watch" in status_text(app)
        await pilot.press("n")
        await until(pilot, lambda: any("--watch: tokentop sends no request" in n for n in notes(app)), what="n refused")
        assert decodes(llama_server) == before
        taken: list[int] = []
        add = app.session.leak.add
        app.session.leak.add = lambda b: (taken.append(b), add(b))[1]
        # Another client's requests, one at a time, idle between; each long enough (1.3 s alone,
        # more beside the tier's other workers) that the client's 8-Hz poll finds it busy even when
        # held back a while: the baseline is taken where busy turns idle.
        for k in range(3):
            for t in generate(llama_server.url, 160):
                while t.is_alive():
                    await pilot.pause(0.05)
            await until(pilot, lambda k=k: app.session.leak.seen >= k + 1, timeout=10, what=f"idle baseline {k + 1}")
        rss = psutil.Process(llama_server.proc.pid).memory_info().rss
        assert len(taken) == 3 and app.session.verdict.status == "collecting"
        assert all(abs(b - rss) < 8 * 2**20 for b in taken)  # the server's own process, as psutil reads it
        await pilot.press("q")
