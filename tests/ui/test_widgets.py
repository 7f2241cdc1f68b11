"""The panes drawn by our own code: what they show must equal what a plain computation gives."""

import os
import random
from itertools import pairwise

from rich.text import Text
from textual.app import App

from tests.helpers.one_widget import One, subtitle
from tests.helpers.synthetic import session_events
from tui_app.core.columns import COLUMNS, GAP, fit_columns
from tui_app.core.session import Session
from tui_app.ui.widgets.runs_table import RunsTable
from tui_app.ui.widgets.token_stream import FREEZE_CHARS, TokenStream, page_top

WORDS = ["the", "keeper", "wrote", "down", "weather,", "a", "lighthouse", "ships.", "extraordinarily", "x" * 50]


def wrapped_page(app: App, text: str, width: int, height: int) -> list[str]:
    """The reference: the whole text wrapped at once, paragraph by paragraph, the page of
    `height` lines that holds the last, blank below it."""
    lines = []
    for para in text.split("\n"):
        lines += [line.plain.rstrip() for line in Text(para).wrap(app.console, width)] or [""]
    page = lines[page_top(len(lines), height) :]
    return page + [""] * (height - len(page))


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
        expected = wrapped_page(app, "".join(t for t, *_ in pane.chunks), width, height)
        assert shown == expected, "the text from the top, blank below"
        assert expected[-1] == "", "the whole text is on screen, frozen lines included"
        await pilot.resize_terminal(70, 20)  # a new width re-wraps what is kept
        await pilot.pause()
        pane.redraw()
        shown = [strip.text.rstrip() for strip in pane._strips]
        assert shown == wrapped_page(app, "".join(t for t, *_ in pane.chunks), pane.content_size.width, pane.content_size.height)


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
    rows = [tuple(c.cell(r) for c in COLUMNS) for r in Session.from_events(session_events(runs=3)).rows()]
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
    session = Session.from_events(session_events(runs=12))  # more rows than the table's nine
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
    """A run without the cache shows no KV figures, not the previous run's "7.4 MiB measured = 7.4 MiB formula"."""
    from monitors.events import Levers, RunStarted, Step
    from tui_app.ui.widgets.kv_chart import KVChart

    events = session_events(runs=1, tokens=8)
    t = events[-1].t_ns
    events += [RunStarted(run_id=2, levers=Levers(cache=False), prompt_tokens=42, max_new_tokens=8, prompt_text="p", t_ns=t + 1)]
    events += [
        Step(
            run_id=2,
            step=i + 1,
            kind="prefill" if i == 0 else "decode",
            token_ids=[1],
            text="a",
            n_tokens=1,
            t_ns=t + 2 + i,
            dt_ns=1,
            forward_ns=1,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=43 + i,
        )
        for i in range(3)
    ]
    session = Session.from_events(events)
    chart = KVChart(session)
    async with One(chart).run_test(size=(80, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        shown = " ".join(strip.text for strip in chart._strips)
        assert "KV cache off" in shown and "measured" not in str(chart.border_subtitle)
        session.feed(RunStarted(run_id=3, levers=Levers(), prompt_tokens=42, max_new_tokens=8, prompt_text="p", t_ns=t + 10))  # cache on again, no token yet
        chart.dirty = True
        chart.redraw(force=True)
        assert "waiting for tokens" in " ".join(strip.text for strip in chart._strips) and not chart.border_subtitle


def test_fit_shortens_then_drops_the_least_important_whole_items():
    from tui_app.core.fmt import fit, word_variants

    items = [(("k:cache",), 0), (word_variants("compile: building the decode step"), 1), (("TTFT 210 ms",), 3), (("18.8 tok/s",), 0)]
    assert fit(items, 200, sep=" ") == ["k:cache", "compile: building the decode step", "TTFT 210 ms", "18.8 tok/s"]
    assert fit(items, 55, sep=" ") == ["k:cache", "compile: building the decode step", None, "18.8 tok/s"]
    assert fit(items, 41, sep=" ") == ["k:cache", "compile: building the…", None, "18.8 tok/s"]
    assert fit(items, 5, sep=" ") == ["k:cache", None, None, "18.8 tok/s"]  # priority 0 stays, even over width
    # A small item that left first comes back where a larger one's leaving made room.
    assert fit([(("engine 900 MiB",), 0), (("(weights 513 + KV 2 + rest 385)",), 1), (("GPU: n/a",), 2)], 30) == ["engine 900 MiB", None, "GPU: n/a"]


async def test_every_gpu_of_the_machine_is_listed_with_its_figures():
    """Two GPUs through the sampler (NVML stood in for: no GPU here), the second lost: the util pane
    lists each one's SM %, clock, power, GPM figures and clock events, the memory pane each one's
    memory, as NVML read them."""
    from monitors.gpu import NvmlReader
    from monitors.sampler import Sampler, to_event
    from tests.helpers.fake_nvml import FakeNVML
    from tui_app.core.session import Session
    from tui_app.ui.widgets.memory_chart import MemoryChart
    from tui_app.ui.widgets.util_chart import UtilChart

    nv = FakeNVML(n=2, procs={0: [(os.getpid(), 700 * 2**20)]}, gpm={0: {10: 81.0, 2: 40.0, 5: 12.5}})  # the sampler watches this process
    sampler = Sampler(gpu=NvmlReader(nv))
    session = Session()
    session.feed(to_event(sampler.sample_once()))
    nv.lost.add(1)
    nv.clock_events[0] = 0x4  # the power cap holds GPU 0's clocks down
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
        assert "GPU busy%" in legend and "GPU mem%" in legend and "GPU DRAM%" in legend
        gpu0 = "GPU0 40% 1980 MHz 250 W DRAM 81% SM active 40% tensor 12% slowed: power cap"
        assert f"{gpu0}  n/a: GPU 1 (GPU is lost)" in str(util.border_subtitle), util.border_subtitle
        assert "GPU0 engine 700 MiB, device 1.0/80 GiB" in str(memory.border_subtitle)
        assert "device 1.0/80 GiB  n/a: GPU 1 (GPU is lost)" in str(memory.border_subtitle)


async def test_a_narrow_pane_keeps_the_gpus_figures_before_the_hosts():
    """At the width a 160-column terminal gives each chart (about 46 columns), the GPU's busy %,
    clock, power and the engine's memory on it stay in the subtitles and its lines in the legend
    (on an H200 they had been the first to go, behind the UI's own CPU and memory)."""
    from monitors.gpu import NvmlReader
    from monitors.sampler import Sampler, to_event
    from tests.helpers.fake_nvml import FakeNVML
    from tui_app.core.session import Session
    from tui_app.ui.widgets.memory_chart import MemoryChart
    from tui_app.ui.widgets.util_chart import UtilChart

    nv = FakeNVML(n=1, procs={0: [(os.getpid(), 1094 * 2**20)]}, gpm={0: {10: 16.0, 2: 96.0, 5: 93.0}})
    nv.clock_events[0] = 0x4
    sampler = Sampler(gpu=NvmlReader(nv))
    session = Session()
    for _ in range(2):  # GPM's figures are rates over the interval between two samples
        session.feed(to_event(sampler.sample_once()))
    sampler.stop()
    util, memory = UtilChart(session), MemoryChart(session)

    class Two(App):
        def compose(self):
            yield util
            yield memory

    async with Two().run_test(size=(46, 30)) as pilot:
        await pilot.pause()
        for chart in (util, memory):
            chart.redraw(force=True)
        assert "GPU 40% 1980 MHz 250 W" in str(util.border_subtitle), util.border_subtitle
        assert "GPU engine 1094 MiB" in str(memory.border_subtitle), memory.border_subtitle
        legend = util._strips[-1].text
        assert legend.startswith("■ GPU busy%") and "GPU DRAM%" in legend, legend


async def test_the_memory_pane_says_where_device_map_placed_the_weights():
    from dataclasses import replace

    from monitors.events import EngineReady
    from tui_app.ui.widgets.memory_chart import MemoryChart

    events = session_events(runs=1, tokens=8)
    ready = next(e for e in events if isinstance(e, EngineReady))
    events[events.index(ready)] = replace(ready, placement={"cuda:0": 3 * 2**30, "cpu": 512 * 2**20})
    chart = MemoryChart(Session.from_events(events))
    async with One(chart).run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        assert "weights cuda:0 3.0 GiB + cpu 512.0 MiB" in str(chart.border_subtitle)


async def test_the_memory_pane_says_the_allocators_trouble_once_there_is_any():
    """torch's memory_stats counters that mean trouble (given here, as a GPU's would be: there is
    none on this machine; gpu_check reads them on CUDA) stand in the pane's subtitle once not 0."""
    from monitors.events import Sampled, TorchMemory
    from tui_app.ui.widgets.memory_chart import MemoryChart

    session = Session.from_events(session_events(runs=1, tokens=8))
    session.feed(TorchMemory(device="cuda:0", allocated=2**30, reserved=2**31, peak=2**31))
    session.feed(Sampled(t_ns=10**12, engine_rss=900 * 2**20, gpu_proc_mem=3 * 2**30))
    chart = MemoryChart(session)
    async with One(chart).run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        assert "allocator" not in str(chart.border_subtitle)
        session.feed(TorchMemory(device="cuda:0", allocated=2**30, reserved=2**31, peak=2**31, trouble={"num_alloc_retries": 3, "num_ooms": 1}))
        session.feed(Sampled(t_ns=2 * 10**12, engine_rss=900 * 2**20, gpu_proc_mem=3 * 2**30))
        chart.dirty = True  # as the app marks a pane on new data
        chart.redraw(force=True)
        assert "allocator: 3 alloc retries, 1 OOMs" in str(chart.border_subtitle)


async def test_on_mps_the_memory_pane_sets_the_drivers_allocation_against_metals_recommended_working_set():
    """Unified memory has no GPU total (the Apple probe says so): Metal's recommended working set,
    as torch.mps reads it (given here: no Mac runs here), is the line the driver's allocation is
    held against, and the pane says when it is over it."""
    from monitors.events import Sampled, TorchMemory
    from tui_app.ui.widgets.memory_chart import MemoryChart

    session = Session.from_events(session_events(runs=1, tokens=8))
    session.feed(TorchMemory(device="mps", allocated=900 * 2**20, reserved=1200 * 2**20, peak=900 * 2**20, limit=10240 * 2**20))
    session.feed(Sampled(t_ns=10**12, engine_rss=900 * 2**20))
    chart = MemoryChart(session)
    async with One(chart).run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        assert "MPS 1200 of 10240 MiB Metal recommends" in str(chart.border_subtitle), chart.border_subtitle
        session.feed(TorchMemory(device="mps", allocated=11000 * 2**20, reserved=12000 * 2**20, peak=11000 * 2**20, limit=10240 * 2**20))
        session.feed(Sampled(t_ns=2 * 10**12, engine_rss=900 * 2**20))
        chart.dirty = True
        chart.redraw(force=True)
        assert "MPS 12000 MiB: over the 10240 Metal recommends" in str(chart.border_subtitle), chart.border_subtitle
        session.feed(TorchMemory(device="cuda:0", allocated=2**30, reserved=2**31, peak=2**31))
        session.feed(Sampled(t_ns=3 * 10**12, engine_rss=900 * 2**20))
        chart.dirty = True
        chart.redraw(force=True)
        assert "Metal" not in str(chart.border_subtitle)


async def test_the_memory_pane_shows_the_allocator_history_recording_then_its_path():
    """The H key's window as the engine reports it (AllocatorHistory events, as on a GPU: this
    machine has none; gpu_check records one): the runs to go while recording, then the file."""
    from monitors.events import AllocatorHistory, Sampled
    from tui_app.ui.widgets.memory_chart import MemoryChart

    session = Session.from_events(session_events(runs=1, tokens=8))
    session.feed(AllocatorHistory(path="/data/tokentop-x-cuda-history.pickle", runs=3, left=3, first_run=2))
    session.feed(Sampled(t_ns=10**12, engine_rss=900 * 2**20))
    chart = MemoryChart(session)
    async with One(chart).run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        assert "CUDA allocator history: recording runs 2-4, 3 to go" in str(chart.border_subtitle)
        session.feed(AllocatorHistory(path="/data/tokentop-x-cuda-history.pickle", runs=3, left=0, first_run=2, seconds=0.4))
        chart.dirty = True
        chart.redraw(force=True)
        assert "/data/tokentop-x-cuda-history.pickle" in str(chart.border_subtitle)
    said = [text for _, text in session.messages]
    assert any("recording runs 2-4" in m for m in said) and any("memory_viz" in m for m in said), said


def _point_rows(canvas) -> list[tuple[int, int]]:
    """(column, row) of each cell the leak view drew a fitted baseline in, left to right."""
    from tui_app.core.leak_view import POINT

    return sorted((c, r) for r, row in enumerate(canvas.rows()) for c, (_, owner) in enumerate(row) if owner == POINT)


def test_the_leak_view_draws_rising_baselines_rising_and_flat_ones_flat():
    """The baselines on an axis of their own: 1 MiB a run on a 1.2 GB engine climbs the whole
    canvas (on memory over time, from 0, it is a flat line); noise of 0.1 MiB stays in a band a
    few rows high (the axis never zooms below 1 MiB). The warm-up runs are drawn apart."""
    from monitors.leaks import MB, LeakDetector
    from tui_app.core.braille import Canvas
    from tui_app.core.leak_view import WARM, draw

    for rise, noise in ((1.0, 0.0), (0.0, 0.1)):
        leak, rng = LeakDetector(), random.Random(5)
        for run in range(20):
            verdict = leak.add(int((1200 + rise * run + rng.uniform(-noise, noise)) * MB))
        canvas = Canvas(60, 10)
        lo, hi, legend = draw(canvas, leak, verdict)
        points = _point_rows(canvas)
        assert lo <= 1200 + 3 * rise and hi >= 1200 + 19 * rise and hi - lo >= 1.0
        assert [name for name, _ in legend] == ["baseline after a run", "warm-up run", "fit", "95% of its slope"]
        assert any(owner == WARM for row in canvas.rows() for _, owner in row[:10])
        if rise:
            assert verdict.status == "suspected" and points[0][1] - points[-1][1] >= 6 and points[-1][1] <= 1, points
        else:
            assert verdict.status == "none" and max(r for _, r in points) - min(r for _, r in points) <= 2, points


async def test_the_leak_view_is_one_key_away_in_the_memory_pane_and_the_demo_leak_is_said():
    from dataclasses import replace

    from monitors.events import EngineReady
    from tui_app.ui.widgets.memory_chart import MemoryChart

    events = session_events(runs=14, tokens=4)  # baselines 1 MiB a run apart
    ready = next(e for e in events if isinstance(e, EngineReady))
    events[events.index(ready)] = replace(ready, demo_leak="+1 MB/run (tensor)")
    chart = MemoryChart(Session.from_events(events))

    def shown() -> list[str]:
        chart.dirty = True
        chart.redraw(force=True)
        return [strip.text for strip in chart._strips]

    async with One(chart).run_test(size=(80, 12)) as pilot:
        await pilot.pause()
        assert shown()[-2].lstrip().startswith("0MiB┤")  # memory over time: from 0
        chart.leak_view = True
        lines = shown()
        assert str(chart.border_title).startswith("memory — leak: suspected") and "DEMO LEAK" in str(chart.border_title)
        assert "leak view" in str(chart.border_subtitle) and "■ baseline after a run" in lines[-1]
        assert "9" in lines[0] and "MiB┤" in lines[0] and not lines[-2].lstrip().startswith("0")  # the baselines' own axis


async def test_kv_pane_shows_a_batch_of_distinct_prompts_its_pace_rows_and_padding():
    """Each figure under the chart against the same sums done here: the batch's pace and its first
    sequence's over the decode steps, each row's progress, the padded cache's padding, and what
    16-token blocks would hold of the rows' own tokens."""
    from monitors.events import Levers, RunStarted
    from monitors.kvcache import kv_formula_bytes
    from tests.helpers.synthetic import batch_step
    from tui_app.core.fmt import nbytes
    from tui_app.ui.widgets.kv_chart import KVChart

    per = kv_formula_bytes(4, 1, 1, 30, 3, 64)  # the synthetic model's bytes per cached token, by the formula
    events = session_events(runs=1, tokens=8)
    t = events[-1].t_ns
    events += [RunStarted(run_id=2, levers=Levers(batch=4), prompt_tokens=10, max_new_tokens=8, prompt_text="p", t_ns=t + 1)]
    # (kind, rows [number, prompt, new, max new], waiting, the step's tokens, its interval in ms)
    plan = [
        ("prefill", [[0, 10, 1, 8], [1, 6, 1, 4]], 0, 2, 100),
        ("decode", [[0, 10, 2, 8], [1, 6, 2, 4], [2, 12, 1, 8]], 1, 4, 200),
        ("decode", [[0, 10, 3, 8], [1, 6, 3, 4], [2, 12, 2, 8]], 1, 3, 100),
    ]
    events += [batch_step(*row, run_id=2, step=i + 1, t_ns=t + 2 + i) for i, row in enumerate(plan)]
    session = Session.from_events(events)
    chart = KVChart(session)
    async with One(chart).run_test(size=(80, 20)) as pilot:
        await pilot.pause()
        chart.redraw(force=True)
        lines = [strip.text.rstrip() for strip in chart._strips]
    assert "b3/4 1 waiting  23.3 tok/s, #0 6.7" in lines  # (4 + 3) / 0.3 s and 2 / 0.3 s
    assert "#0 ███░░░░░ 3/8  #1 ██████░░ 3/4  #2 ██░░░░░░ 2/8" in lines
    padding = 1 - 33 / 39  # own tokens 12 + 8 + 13 in 3 rows × 13 columns
    paged = (16 + 16 + 16) * per  # each row's own tokens in whole 16-token blocks
    assert f"{nbytes(39 * per)} held, {padding:.0%} padding; paged: {nbytes(paged)}" in lines
    assert f"{nbytes(33 * per)} measured = {nbytes(33 * per)} formula" in str(chart.border_subtitle)


async def test_an_intel_gpu_shows_the_engines_own_share_clock_and_power_where_its_busy_share_is_not_read(tmp_path):
    """i915 and xe write no device busy %: the pane shows the engine's own share (its fdinfo), the
    clock and the power from the energy counter, on the Battlemage fixture with its counters rising."""
    import shutil
    from pathlib import Path

    from monitors.gpu_intel import IntelSysfsReader
    from monitors.sampler import Sampler, to_event
    from tui_app.core.session import Session
    from tui_app.ui.widgets.util_chart import UtilChart

    tree = tmp_path / "bmg_xe"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "bmg_xe", tree)
    (tree / "proc" / str(os.getpid())).symlink_to(tree / "proc" / "4242")  # the sampler watches this process
    now = [10**12]
    sampler, session = Sampler(gpu=IntelSysfsReader(tree, clock=lambda: now[0])), Session()
    session.feed(to_event(sampler.sample_once()))
    fdinfo, energy = tree / "proc" / "4242" / "fdinfo" / "9", tree / "sys/class/drm/card1/device/hwmon/hwmon5/energy1_input"
    text = fdinfo.read_text().replace("drm-cycles-ccs:\t5104122150", "drm-cycles-ccs:\t9104122150")
    fdinfo.write_text(text.replace("drm-total-cycles-ccs:\t7655183225", "drm-total-cycles-ccs:\t9655183225"))  # 4 of 4 engines' cycles in 2: 50 %
    energy.write_text(str(98765432100 + 60_000_000))  # 60 J in 0.5 s
    now[0] += 500_000_000
    session.feed(to_event(sampler.sample_once()))
    sampler.stop()
    shown = await subtitle(UtilChart(session))
    assert "GPU engine 50% 2850 MHz 120 W" in shown, shown
