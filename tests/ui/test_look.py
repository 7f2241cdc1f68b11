"""The looks: both themes pass WCAG AA on every cell the screen draws (each colouring, the
presenter's screen on and off), the presenter's figures are the status line's, and snapshots of
the presenter's screen, the light theme and each colouring at 80×24 and 160×45."""

import re
from dataclasses import replace

import pytest
from textual.color import Color
from textual.constants import DIM_FACTOR
from textual.containers import VerticalScroll

from monitors.events import Step
from tests.helpers.synthetic import session_events
from tests.ui.test_app import until
from tests.ui.test_app_layout import check_snapshot
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp
from tui_app.ui.look import Look
from tui_app.ui.widgets.token_stream import COLOURINGS

TEXT_AA, GRAPHIC_AA = 4.5, 3.0  # WCAG 2.2: 1.4.3 (text, AA) and 1.4.11 (lines, borders)


def luminance(rgb) -> float:
    """WCAG 2.2's relative luminance of an sRGB colour."""

    def linear(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_contrast_formula_meets_wcag_s_own_figures():
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast((118, 118, 118), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)  # the web's grey that just passes
    assert contrast((255, 255, 255), (255, 255, 255)) == pytest.approx(1.0)


def spoken_events() -> list:
    """The layouts' two runs, their steps given what a speculative run with confidence measured
    carries: each third token an accepted draft with a rejected one after it, probabilities from
    5 % to 99 %, and the first run a reasoning model's (thinking, a tool call, then the answer),
    so that every colouring draws every one of its styles."""
    out = []
    for ev in session_events(runs=2):
        if isinstance(ev, Step) and ev.run_id == 1:
            ev = replace(ev, phase="thinking" if ev.step < 8 else "tool call" if ev.step < 10 else "answer")
        if isinstance(ev, Step) and ev.kind == "decode" and ev.text:
            p = (0.99, 0.7, 0.3, 0.05)[ev.step % 4]
            ev = replace(ev, confidence=[p], token_chars=[len(ev.text)])
            if ev.step % 3 == 0:
                ev = replace(ev, kind="verify", accepted=1, proposed=2, drafted_chars=len(ev.text), rejected_text=" ghost")
        out.append(ev)
    return out


def unreadable(strips, background, text_only: bool = False) -> list[str]:
    """Every run of text on the screen whose colour reads under AA against what is behind it
    (dim drawn as Textual draws it: blended toward the background by its DIM_FACTOR); `text_only`:
    words only, where lines are a table's rules (decoration, outside WCAG 1.4.11)."""
    bad = []
    for y, strip in enumerate(strips):
        for text, style, _ in strip:
            if text_only and not re.search(r"\w", text):
                continue
            if style is None or not text.strip():
                continue
            fg = style.color.get_truecolor() if style.color else None
            bg = style.bgcolor.get_truecolor() if style.bgcolor else background
            if fg is None:
                continue
            if style.reverse:
                fg, bg = bg, fg
            if style.dim:
                fg = tuple(round(b + (f - b) * DIM_FACTOR) for f, b in zip(fg, bg, strict=True))
            need = TEXT_AA if re.search(r"\w", text) else GRAPHIC_AA
            if contrast(fg, bg) < need:
                bad.append(f"row {y} {text.strip()[:30]!r}: {contrast(fg, bg):.2f} < {need} ({fg} on {bg})")
    return bad


def background_of(app) -> tuple[int, int, int]:
    """The theme's background colour, behind every cell that names none of its own."""
    return Color.parse(app.current_theme.to_color_system().generate()["background"]).rgb


async def drawn(app, pilot):
    await pilot.pause(0.2)
    app.monitor.redraw(running=False, force=True)
    await until(pilot, lambda: not any(w.pending for w in app.panes.values() if w.display), timeout=30, what="panes drawn")
    await pilot.pause(0.2)
    return app.screen._compositor.render_strips()


@pytest.mark.parametrize("theme", ["dark", "light"])
async def test_every_cell_reads_at_wcag_aa_in_both_themes_each_colouring_and_the_presenter_s_screen(theme):
    app = TokentopApp(ReplaySource(spoken_events(), speed=0), None, look=Look(theme=theme))
    failures = []
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        assert app.current_theme.dark == (theme == "dark")
        background = background_of(app)
        for present in (False, True):
            if present:
                await pilot.press("P")
            for _ in COLOURINGS:
                strips = await drawn(app, pilot)
                failures += [f"{app.monitor.tokens.colouring}{' present' if present else ''}: {line}" for line in unreadable(strips, background)]
                await pilot.press("o")
    assert not failures, "\n".join(failures)


async def test_the_palette_offers_only_the_two_themes_checked_here():
    """Textual's command palette changes the theme among those registered: only the dark and the
    light one, which the test above reads at WCAG AA, are."""
    app = TokentopApp(ReplaySource(spoken_events(), speed=0), None, look=Look(theme="light"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert set(app.available_themes) == {"textual-dark", app.theme} and not app.current_theme.dark


@pytest.mark.parametrize("theme", ["dark", "light"])
async def test_the_anatomy_ledger_and_help_screens_read_at_wcag_aa(theme):
    """The screens over the monitor, each part of the anatomy in its colour, the ledger's verdicts
    and the help's table, against the same bounds."""
    from monitors.events import Anatomy, Levers, RunFinished
    from tui_app.core.readings import PART_LABELS

    events = spoken_events()
    end = next(i for i, ev in enumerate(events) if isinstance(ev, RunFinished))
    parts = {part: 5.0 + k for k, part in enumerate(PART_LABELS)}
    anatomy = Anatomy(run_id=1, steps=8, step_ms=60.0, parts=parts, gpu_ms={}, trace="t.json", levers=Levers(), ops_ms=50.0, ops=300)
    app = TokentopApp(ReplaySource([*events[:end], anatomy, *events[end:]], speed=0), None, look=Look(theme=theme))
    failures = []
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.state == "replay finished" and type(app.screen).__name__ == "AnatomyScreen", timeout=30, what="the anatomy")
        background = background_of(app)
        for name, key in (("anatomy", "escape"), ("ledger", "g"), ("help", "question_mark")):
            if name != "anatomy":
                await pilot.press(key)
            await pilot.pause(0.5)
            assert type(app.screen).__name__.lower().startswith(name), app.screen
            strips = app.screen._compositor.render_strips()
            if name == "help":  # a modal: the monitor dimmed around it is not for reading, its table's rules are decoration
                box = app.screen.query_one(VerticalScroll).content_region
                strips = [strip.crop(box.x, box.right) for strip in strips[box.y : box.bottom]]
            failures += [f"{name}: {line}" for line in unreadable(strips, background, text_only=name == "help")]
            await pilot.press("escape")
    assert not failures, "\n".join(failures)


def test_a_thick_canvas_draws_each_dot_two_high():
    from tui_app.core.braille import Canvas

    thin, thick = Canvas(4, 2), Canvas(4, 2, thick=True)
    for canvas in (thin, thick):
        canvas.dot(1, 3, 0)  # the last row of the first cell: the dot below is the next cell's first row
        canvas.dot(6, 7, 0)  # the canvas's last row: nothing below it to set
    blank = "\u2800"
    assert thin.lines() == ["⢀" + blank * 3, blank * 3 + "⡀"]
    assert thick.lines() == ["⢀" + blank * 3, "⠈" + blank * 2 + "⡀"]


async def test_the_presenter_s_screen_shows_the_status_line_s_figures_large_and_gives_the_table_s_room():
    from tui_app.ui.widgets.big_numbers import figure

    app = TokentopApp(ReplaySource(spoken_events(), speed=0), None, look=Look(present=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        await drawn(app, pilot)
        monitor = app.monitor
        assert monitor.present and monitor.numbers.display and not app.panes["runs"].display and monitor.mode == "narrow"
        assert [chart.id for chart in monitor.charts if chart.display] == ["latency"] and all(chart.thick for chart in monitor.charts)
        st = app.session.current.total
        shown = {key: digits.value for key, digits in monitor.numbers.digits.items()}
        assert shown == {"tok/s": figure(st.decode_tps), "ttft": figure(st.ttft_s * 1000), "itl": figure(st.itl.p50 * 1000)}
        status = str(app.status.render())
        assert f"{st.decode_tps:.1f} tok/s" in status and float(shown["tok/s"]) == pytest.approx(st.decode_tps, abs=0.5)
        await pilot.press("v")
        assert [chart.id for chart in monitor.charts if chart.display] == ["kv"]
        await pilot.press("P")  # off: the engineer's screen as the size gives it
        await drawn(app, pilot)
        assert not monitor.present and not monitor.numbers.display and app.panes["runs"].display
        assert not any(chart.thick for chart in monitor.charts) and "presenter's screen off" in app.told[-1]


LOOKS = {"present": (Look(present=True), 0), "light": (Look(theme="light"), 0), "present-light": (Look(theme="light", present=True), 0)}
LOOKS |= {colouring: (Look(), COLOURINGS.index(colouring)) for colouring in COLOURINGS[1:]}


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", LOOKS)
async def test_look_snapshots(name, size):
    """Deterministic data; TOKENTOP_UPDATE_SNAPSHOTS=1 rewrites the files (look at them)."""
    look, presses = LOOKS[name]
    app = TokentopApp(ReplaySource(spoken_events(), speed=0), None, look=look)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        for _ in range(presses):
            await pilot.press("o")
        await pilot.pause(0.5)
        await drawn(app, pilot)
        svg = app.export_screenshot()
    check_snapshot(svg, f"look-{name}-{size[0]}x{size[1]}", f"the {name} look at {size[0]}x{size[1]}")
