"""The app's layout: snapshots at three sizes and in three terminal modes (16 colours, no colour,
--ascii), no title, legend, status or key cut at any size, and the restart question whole at 80
columns."""

import os
import re
from pathlib import Path

import pytest

from tests.helpers.synthetic import session_events
from tests.ui.test_app import until
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp
from tui_app.ui.look import Look

SNAPSHOTS = Path(__file__).parent / "snapshots"


def normalized_svg(svg: str) -> str:
    # Textual names each export's CSS classes terminal-<hash>; the hash varies between runs of
    # an identical screen, so it is replaced before comparing.
    import re

    return re.sub(r"terminal-\d+", "terminal", svg)


def check_snapshot(svg: str, name: str, what: str) -> None:
    """The screen against its snapshot `name`.svg; TOKENTOP_UPDATE_SNAPSHOTS=1 rewrites it (look at
    it), and a difference is written beside it as failed-`name`.svg."""
    svg = normalized_svg(svg)
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("TOKENTOP_UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(svg, encoding="utf-8")
    assert path.exists(), f"no snapshot {path.name}: run with TOKENTOP_UPDATE_SNAPSHOTS=1 and look at it"
    if svg != path.read_text(encoding="utf-8"):
        got = path.with_name(f"failed-{path.name}")
        got.write_text(svg, encoding="utf-8")
        raise AssertionError(f"{what} changed: compare {got} with {path}")


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_layout_snapshots(size):
    """Deterministic data (no model, no clock); TOKENTOP_UPDATE_SNAPSHOTS=1 rewrites the files.
    Two runs (four table rows) fit the runs table at 80×24 unscrolled: where a scroll lands is timing."""
    app = TokentopApp(ReplaySource(session_events(runs=2), speed=0), None)
    async with app.run_test(size=size) as pilot:
        # Wait for the state being photographed, not a fixed time: on a loaded machine (an engine
        # from an earlier test still loading) the first frames can take longer than any pause.
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await pilot.pause(0.5)
        await until(pilot, lambda: not any(w.pending for w in app.panes.values() if w.display), timeout=30, what="panes drawn")
        svg = app.export_screenshot()
    check_snapshot(svg, f"layout-{size[0]}x{size[1]}", f"the {size[0]}x{size[1]} layout")


LEGEND_NAMES = {"decode", "spec verify", "mean", "p95", "prefill", "lever", "measured", "formula", "allocated", "engine RSS", "UI RSS", "GPU proc"}
LEGEND_NAMES |= {"GPU device", "torch alloc", "torch reserved", "run end", "engine CPU%", "system CPU%", "UI CPU%", "GPU busy%"}


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_no_title_legend_status_or_key_is_cut(size):
    """At 160×45 the latency legend ended "■ pr" and titles lost p95, the KV formula and the GPU reason;
    at 100×30 and 80×24 the status lost the "tok/s" unit and the key bar never showed v."""
    app = TokentopApp(ReplaySource(session_events(runs=2), speed=0), None)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await pilot.pause(0.5)
        await until(pilot, lambda: not any(w.pending for w in app.panes.values() if w.display), timeout=30, what="panes drawn")
        for w in app.query("*"):
            if w.display and w.region.width and (w.border_title or w.border_subtitle):
                for text in (str(w.border_title or ""), str(w.border_subtitle or "")):
                    assert len(text) <= w.size.width - 6, (w.id, text)
        screen = [strip.text for strip in app.screen._compositor.render_strips()]
        assert not [line for line in screen if ("╭" in line or "╰" in line) and "…" in line]
        for state in ("replay finished", "compile: compiling the decode step (static cache 256, batch 1, off); a first compile takes a minute or more… 12 s"):
            app.status.show(app.session, state, "long", True)  # the longest line: a long state, auto on
            status = str(app.status.render())
            # the headline unit whole, and the memory read rate after it when it fits
            assert len(status) <= app.status.content_size.width and re.search(r"tok/s( mem bw [\d.]+( \([\d.]+ of [\d.]+ GB/s\))?)?$", status.rstrip()), status
            assert "│ compile" in status or "│ replay" in status, status
        keys = str(app.key_bar.render()).rstrip()
        assert len(keys) <= size[0] and "? help" in keys and "q quit" in keys
        assert ("v view" in keys) == (app.monitor.mode != "wide")
        for name in ("latency", "kv", "memory", "util"):
            pane = app.panes[name]
            if pane.display:
                legend = [piece.strip() for piece in pane._strips[-1].text.split("■") if piece.strip()]
                assert legend and set(legend) <= LEGEND_NAMES, (name, legend)


async def test_the_restart_question_wraps_whole_at_80_columns():
    from textual.app import App

    from tui_app.ui.screens.confirm import ConfirmScreen

    question = (
        "The engine is working. Restart it? Run 3, in flight, is stopped. Finished runs are kept; compiled and quantized variants are rebuilt when next used."
    )

    class Host(App):
        def on_mount(self):
            self.push_screen(ConfirmScreen(question))

    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = " ".join(" ".join(strip.text.replace("█", " ").split()) for strip in app.screen._compositor.render_strips())
    assert question in shown


@pytest.mark.parametrize("mode", ["16-colours", "no-color", "ascii"])
async def test_terminal_mode_snapshots(mode, monkeypatch):
    """What a 16-colour terminal, NO_COLOR and --ascii show, on the same deterministic data as the
    layouts: every text readable (no colour on a background of its own colour), every chart and
    border drawn (ASCII: nothing outside it in the lines that carry them)."""
    if mode == "no-color":
        monkeypatch.setenv("NO_COLOR", "1")  # Textual reads it as the app starts
    app = TokentopApp(ReplaySource(session_events(runs=2), speed=0), None, look=Look(ascii=mode == "ascii"))
    if mode == "16-colours":
        app.colors = 16
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await pilot.pause(0.5)
        await until(pilot, lambda: not any(w.pending for w in app.panes.values() if w.display), timeout=30, what="panes drawn")
        strips = app.screen._compositor.render_strips()
        svg = app.export_screenshot()
    for strip in strips:
        for text, style, _ in strip:
            if style is not None and text.strip() and style.color is not None and style.bgcolor is not None and not style.reverse:
                assert style.color != style.bgcolor, (mode, text)
    if mode == "ascii":
        charts_and_borders = "".join(strip.text for strip in strips[1:-1])  # not the status line's lever marks nor the prompt text
        drawn = {ch for ch in charts_and_borders if not ch.isascii()}
        assert not drawn, drawn
    check_snapshot(svg, f"terminal-{mode}-120x40", f"the {mode} look")
