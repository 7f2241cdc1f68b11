"""The panes drawn by our own code: what they show must equal what a plain computation gives."""

import os
import random
from itertools import pairwise

from rich.text import Text
from textual.app import App

from tests.helpers.synthetic import session_events
from tui_app.commands.replay import fold
from tui_app.ui.widgets.runs_table import COLUMNS, GAP, RunsTable, fit_columns
from tui_app.ui.widgets.token_stream import FREEZE_CHARS, TokenStream

WORDS = ["the", "keeper", "wrote", "down", "weather,", "a", "lighthouse", "ships.", "extraordinarily", "x" * 50]


def wrapped_tail(app: App, text: str, width: int, height: int) -> list[str]:
    """The reference: the whole text wrapped at once, paragraph by paragraph, last `height` lines."""
    lines = []
    for para in text.split("\n"):
        lines += [line.plain.rstrip() for line in Text(para).wrap(app.console, width)] or [""]
    return lines[-height:]


class One(App):
    def __init__(self, widget):
        super().__init__()
        self.widget = widget

    def compose(self):
        yield self.widget


async def test_token_stream_wraps_incrementally_as_a_full_wrap_would():
    rng = random.Random(7)
    pane = TokenStream()
    app = One(pane)
    async with app.run_test(size=(50, 500)) as pilot:  # tall enough to show every line
        await pilot.pause()
        width, height = pane.content_size.width, pane.content_size.height
        pane.add_prompt(1, "Tell me a story.", "cache")
        for i in range(900):  # long enough that one paragraph passes FREEZE_CHARS
            token = (" " if rng.random() < 0.8 else "") + rng.choice(WORDS)
            if i % 400 == 399:
                token += "\n\n"
            pane.add_text(token)
            if i % 7 == 0:  # redraws land between tokens at arbitrary points, as frames do
                pane.redraw()
        pane.add_text(" " + "y" * (FREEZE_CHARS + 10))  # a word longer than the freeze limit
        pane.redraw()
        shown = [strip.text.rstrip() for strip in pane._strips]
        expected = wrapped_tail(app, "".join(t for t, _ in pane.chunks), width, height)
        assert shown[: len(expected)] == expected and not any(shown[len(expected) :]), "the text from the top, blank below"
        assert len(expected) < height, "the whole text is on screen, frozen lines included"
        await pilot.resize_terminal(70, 20)  # a new width re-wraps what is kept
        await pilot.pause()
        pane.redraw()
        shown = [strip.text.rstrip() for strip in pane._strips]
        assert shown == wrapped_tail(app, "".join(t for t, _ in pane.chunks), pane.content_size.width, pane.content_size.height)


async def test_token_stream_pages_lines_keep_their_rows():
    """A new line does not move the lines above it (each would be sent to the terminal again); a
    full pane moves half a pane on."""
    pane = TokenStream()
    app = One(pane)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        height = pane.content_size.height
        rows = []
        for i in range(3 * height):
            pane.add_text(f"line {i}\n")
            pane.redraw()
            rows.append([strip.text.rstrip() for strip in pane._strips])
        for before, after in pairwise(rows):
            kept = [a == b for a, b in zip(before, after, strict=True) if a]
            jumped = after[0] != before[0]
            assert jumped or all(kept), "lines stay where they are until the pane is full"
            if jumped:
                # the lines so far and the one still growing (empty here) fill the upper half
                assert all(after[: height // 2 - 1]) and not any(after[height // 2 - 1 :]), after
                carried = [line for line in after if line][:-1]
                assert carried == [line for line in before if line][-len(carried) :], "the lower half moves up, whole"


def test_fit_columns_keeps_whole_cells_and_leaves_out_the_least_important():
    rows = [tuple(c.cell(r) for c in COLUMNS) for r in fold(session_events(runs=3)).rows()]
    everything, widths = fit_columns(rows, 1000)
    assert everything == list(range(len(COLUMNS)))
    full = sum(widths) + GAP * (len(widths) - 1)
    for width in range(full, 20, -1):
        shown, widths = fit_columns(rows, width)
        assert [COLUMNS[i].title for i in shown][:2] == ["run", "levers"]
        if sum(widths) + GAP * (len(shown) - 1) > width:  # only the columns that are never left out remain
            assert all(COLUMNS[i].priority == 0 for i in shown)
        left_out = set(range(len(COLUMNS))) - set(shown)
        if left_out:  # nothing shown is less important than something left out
            assert max(COLUMNS[i].priority for i in shown) <= min(COLUMNS[i].priority for i in left_out)
        for i, w in zip(shown, widths, strict=True):
            assert all(len(r[i]) <= w for r in rows if len(r[i]) <= COLUMNS[i].cap)


async def test_runs_table_shows_every_number_whole():
    session = fold(session_events(runs=12))  # more rows than the table's nine
    table = RunsTable(session)
    app = One(table)
    async with app.run_test(size=(60, 12)) as pilot:
        await pilot.pause()
        table.redraw()
        lines = [strip.text for strip in table._strips]
        header, body = lines[0], lines[1:]
        rows = session.rows()
        assert len(body) == min(len(rows), table.content_size.height - 1)
        for line, row in zip(body, rows[-len(body) :], strict=True):
            for col in COLUMNS:
                if col.title in header:
                    assert col.cell(row) in line, (col.title, col.cell(row), line)
        assert "tok/s" in header and "ITL p50" in header

        table._scroll(2)  # the wheel shows older rows and says so
        assert "newer below" in table.border_title
        assert table._strips[1].text.split()[0] == rows[-len(body) - 2].label


async def test_kv_pane_shows_only_the_current_runs_cache():
    """A no-cache run used to keep the previous run's "7.4 MiB measured = 7.4 MiB formula"."""
    from monitors.events import Levers, RunStarted, Step
    from tui_app.ui.widgets.kv_chart import KVChart

    events = session_events(runs=1, tokens=8)
    t = events[-1].t_ns
    events += [RunStarted(2, Levers(cache=False), 42, 8, "p", t_ns=t + 1)]
    events += [Step(2, i + 1, "prefill" if i == 0 else "decode", [1], "a", 1, t + 2 + i, 1, 1, 0, 0, 43 + i) for i in range(3)]
    session = fold(events)
    chart = KVChart(session)
    async with One(chart).run_test(size=(80, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        shown = " ".join(strip.text for strip in chart._strips)
        assert "KV cache off" in shown and "measured" not in str(chart.border_subtitle)
        session.feed(RunStarted(3, Levers(), 42, 8, "p", t_ns=t + 10))  # cache on again, no token yet
        chart.dirty = True
        chart.redraw(force=True)
        assert "waiting for tokens" in " ".join(strip.text for strip in chart._strips) and not chart.border_subtitle


def test_a_run_switched_midway_is_labelled_with_the_levers_its_numbers_come_from():
    """Run 2 switches to int8 halfway: its ppl and output are int8's, so the row says cache→cache int8
    (it said "cache", the starting levers, beside int8's perplexity)."""
    from tui_app.commands.run import row_line

    rows = {row.label: row for row in fold(session_events(runs=2)).rows()}
    assert rows["1"].levers_label == "cache"
    assert rows["2"].levers_label == "cache→cache int8"
    assert (rows["2.0"].levers_label, rows["2.1"].levers_label) == ("cache", "cache int8")
    levers_col = next(c for c in COLUMNS if c.title == "levers")
    assert levers_col.cell(rows["2"]) == "cache→cache int8" and "[cache→cache int8]" in row_line(rows["2"])


def test_a_run_that_ends_before_its_limit_says_why():
    from dataclasses import replace

    from monitors.events import RunFinished
    from tui_app.commands.run import row_line

    events = session_events(runs=3, tokens=8)
    reasons = {1: "eos", 2: "stopped", 3: "max tokens"}
    events = [replace(e, stop_reason=reasons[e.run_id]) if isinstance(e, RunFinished) else e for e in events]
    rows = {row.label: row for row in fold(events).rows()}
    assert rows["1"].note.startswith("eos · ") and "ended: eos" in row_line(rows["1"])
    assert rows["2"].note.startswith("stopped · ") and "ended: stopped" in row_line(rows["2"])
    assert "ended" not in row_line(rows["3"]) and rows["3"].note == rows["3"].finished.diff_note


def test_fit_shortens_then_drops_the_least_important_whole_items():
    from tui_app.core.fmt import fit, word_variants

    items = [(("k:cache",), 0), (word_variants("compile: building the decode step"), 1), (("TTFT 210 ms",), 3), (("18.8 tok/s",), 0)]
    assert fit(items, 200, sep=" ") == ["k:cache", "compile: building the decode step", "TTFT 210 ms", "18.8 tok/s"]
    assert fit(items, 55, sep=" ") == ["k:cache", "compile: building the decode step", None, "18.8 tok/s"]
    assert fit(items, 41, sep=" ") == ["k:cache", "compile: building the…", None, "18.8 tok/s"]
    assert fit(items, 5, sep=" ") == ["k:cache", None, None, "18.8 tok/s"]  # priority 0 stays, even over width


async def test_every_gpu_of_the_machine_is_listed_with_its_figures():
    """Two GPUs through the sampler (NVML stood in for: no GPU here), the second lost: the util pane
    lists each one's SM %, clock and power, the memory pane each one's memory, as NVML read them."""
    from monitors.gpu import NvmlReader
    from monitors.sampler import Sampler, to_event
    from tests.helpers.fake_nvml import FakeNVML
    from tui_app.core.session import Session
    from tui_app.ui.widgets.memory_chart import MemoryChart
    from tui_app.ui.widgets.util_chart import UtilChart

    nv = FakeNVML(n=2, procs={0: [(os.getpid(), 700 * 2**20)]})  # the sampler watches this process
    sampler = Sampler(gpu=NvmlReader(nv))
    session = Session()
    session.feed(to_event(sampler.sample_once()))
    nv.lost.add(1)
    session.feed(to_event(sampler.sample_once()))
    sampler.stop()
    last = session.samples[-1]
    assert [g["index"] for g in last.gpus] == [0, 1] and last.gpu_mem_util == 20.0 and last.gpu_sm_clock_mhz == 1980
    util, memory = UtilChart(session), MemoryChart(session)

    class Two(App):
        def compose(self):
            yield util
            yield memory

    async with Two().run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        for chart in (util, memory):
            chart.redraw(force=True)
        legend = " ".join(strip.text for strip in util._strips)
        assert "GPU SM%" in legend and "GPU mem%" in legend
        assert "GPU0 40% 1980 MHz 250 W" in str(util.border_subtitle) and "GPU0 40% 1980 MHz 250 W  n/a: GPU 1 (GPU is lost)" in str(util.border_subtitle)
        assert "GPU0 engine 700 MiB, device 1.0/80 GiB" in str(memory.border_subtitle)
        assert str(memory.border_subtitle).endswith("n/a: GPU 1 (GPU is lost)")


async def test_the_memory_pane_says_where_device_map_placed_the_weights():
    from dataclasses import replace

    from monitors.events import EngineReady
    from tui_app.ui.widgets.memory_chart import MemoryChart

    events = session_events(runs=1, tokens=8)
    ready = next(e for e in events if isinstance(e, EngineReady))
    events[events.index(ready)] = replace(ready, placement={"cuda:0": 3 * 2**30, "cpu": 512 * 2**20})
    chart = MemoryChart(fold(events))
    async with One(chart).run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        assert "weights cuda:0 3.0 GiB + cpu 512.0 MiB" in str(chart.border_subtitle)
