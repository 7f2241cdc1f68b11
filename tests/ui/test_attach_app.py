"""The TUI attached to the real llama.cpp server: the same panes, the server's own pane, the client's
levers working and the server's refused with what to do instead."""

import pytest

from monitors.sampler import Sampler
from tests.ui.test_app import APP_SIZE, finished, notes, status_text, until
from tui_app.attach.client import AttachConfig
from tui_app.core import readings
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.server_pane import ServerPane


def lines(widget) -> str:
    return "\n".join(strip.text for strip in widget._strips) + f"\n{widget.border_title}\n{widget.border_subtitle}"


async def test_attached_app_streams_shows_the_server_and_refuses_its_levers(llama_server, tmp_path):
    source = AttachSource([AttachConfig(url=llama_server.url, metrics_hz=4)])
    app = TokentopApp(source, RunRequest(max_new_tokens=24, ignore_eos=True), sampler=Sampler(hz=4), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=60, what="the first run")
        assert "llama.cpp" in status_text(app) and "b:c1" in status_text(app) and "tok/s" in status_text(app)
        # The memory pane follows the server's own process, found by its port.
        assert source.pid == llama_server.proc.pid
        await until(pilot, lambda: any(s.engine_rss for s in app.session.samples), what="server RSS sampled")
        pane = app.query_one(ServerPane)
        await until(pilot, lambda: "llamacpp:requests_processing" in lines(pane), what="server figures with their sources")
        assert "server — llama.cpp" in lines(pane)

        for key, what in (("k", "the KV cache"), ("c", "compilation"), ("w", "the weights' format"), ("s", "speculative decoding")):
            await pilot.press(key)
            await until(pilot, lambda what=what: any(n.startswith(what) and "second server" in n for n in notes(app)), what=f"{key} refused")
        await pilot.press("space")
        await until(pilot, lambda: any("cannot be paused" in n for n in notes(app)), what="pause refused")
        assert app.state != "paused"
        await pilot.press("m")
        await until(pilot, lambda: any("not a replay's or a server's" in n for n in notes(app)), what="m refused")
        assert readings.read_rate(app.session) is None and "mem bw" not in status_text(app)

        await pilot.press("b")
        await until(pilot, lambda: app.session.levers.batch == 2, what="concurrency 2")
        n = finished(app)
        await pilot.press("r")
        await until(pilot, lambda: finished(app) > n, timeout=60, what="a run of two streams")
        rec = app.session.timer.runs[app.session.finished_ids[-1]]
        assert rec.started.levers.batch == 2 and len([s for s in rec.segments if s.n_tokens]) == 2
        assert "b:c2" in status_text(app)
        await pilot.press("q")


async def test_two_servers_t_moves_runs_and_auto_alternates(llama_server, tmp_path):
    from tests.helpers.llama_server import LlamaServer
    from tui_app.ui.widgets.runs_table import RunsTable

    other = LlamaServer("--ctx", "2048")
    try:
        source = AttachSource([AttachConfig(url=llama_server.url, label="four-slots"), AttachConfig(url=other.url, label="ctx2k")])
        app = TokentopApp(source, RunRequest(max_new_tokens=8, ignore_eos=True), fps=8, out_dir=str(tmp_path))
        async with app.run_test(size=APP_SIZE) as pilot:
            await until(pilot, lambda: finished(app) >= 1, timeout=60, what="the first run")
            assert "t:four-slots" in status_text(app)
            await pilot.press("t")
            await until(pilot, lambda: app.session.levers.server == "ctx2k", what="the second server")
            assert "t:ctx2k" in status_text(app)
            await pilot.press("r")
            await until(pilot, lambda: finished(app) >= 2, timeout=60, what="a run on the second server")
            await pilot.press("a")
            await until(pilot, lambda: finished(app) >= 4, timeout=90, what="auto-repeat alternating")
            await pilot.press("a")
            labels = [app.session.timer.runs[i].started.levers.server for i in list(app.session.finished_ids)[:4]]
            assert labels == ["four-slots", "ctx2k", "four-slots", "ctx2k"]
            table = app.query_one(RunsTable)
            table.dirty = True
            table.redraw(force=True)
            text = "\n".join(strip.text for strip in table._strips)
            assert readings.comparison(app.session)[0] in text and text.count("ctx2k c1") >= 2
            await pilot.press("q")
    finally:
        other.close()


async def test_t_with_one_server_says_how_to_compare(llama_server, tmp_path):
    app = TokentopApp(AttachSource([AttachConfig(url=llama_server.url)]), RunRequest(max_new_tokens=4), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: app.session.ready is not None, timeout=60, what="connected")
        await pilot.press("t")
        await until(pilot, lambda: any("tokentop attach URL_A URL_B" in n for n in notes(app)), what="t refused")
        await pilot.press("q")


@pytest.mark.serial
async def test_a_servers_first_figures_are_drawn_in_the_frame_they_arrive(llama_server, tmp_path):
    """The server pane drew "waiting for the server's KV figure" in the first frame; the frame in
    which the first figures arrive draws them too, not one past the pane's own rate limit (half a
    second later: `attach` launch to data, benchmarks/serving/attach_launch.py)."""
    source = AttachSource([AttachConfig(url=llama_server.url)])
    app = TokentopApp(source, RunRequest(max_new_tokens=8, ignore_eos=True), fps=4, out_dir=str(tmp_path))
    seen: list[str] = []
    tick = app.tick

    def tick_and_look(first: bool = False) -> None:
        tick(first)
        if first and app.first_data_in() and not seen:
            seen.append(lines(app.query_one(ServerPane)))

    app.tick = tick_and_look  # type: ignore[method-assign]
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: bool(seen), timeout=30, what="the frame with the first figures")
        assert "llamacpp:" in seen[0] and "waiting for the server" not in seen[0], seen[0]
        await pilot.press("q")
