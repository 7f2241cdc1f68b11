"""`tokentop report`: from a real short session recorded on the real model and a real small bench,
every figure is in the page and every number of the runs table is the one computed here, independently,
from the raw events."""

import argparse
import json
import os
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from monitors.events import RunFinished, RunStarted, Step
from monitors.record import Recorder, read_recording
from tests.helpers import browser
from tui_app.cli import main
from tui_app.requests import SetLever

SESSION_FIGURES = ("latency", "ttft", "kv", "memory", "utilization")
BENCH_FIGURES = ("ttft", "itl", "tps")


@pytest.fixture(scope="module")
def recorded(engine, tmp_path_factory):
    """Two runs on the real model into a Session with a Recorder: a plain one, and one that switches
    to int8 after 3 steps (so it re-prefills), with real sampler readings between steps, the way the
    app interleaves them. Returns (path, the live session)."""
    from monitors.sampler import Sampler, to_event
    from tui_app.commands.bench import apply_levers
    from tui_app.core.session import Session
    from tui_app.requests import RunRequest

    path = tmp_path_factory.mktemp("report") / "session.jsonl"
    recorder = Recorder(path)
    session = Session(recorder=recorder)
    sampler = Sampler()
    sampler.watch("engine", os.getpid())  # the engine runs in this process here
    steps = [0]  # of the run in flight

    def emit(ev):
        session.feed(ev)
        if isinstance(ev, RunStarted):
            steps[0] = 0
        elif isinstance(ev, Step):
            steps[0] += 1
        if isinstance(ev, (RunStarted, RunFinished)) or (isinstance(ev, Step) and steps[0] % 3 == 0):
            session.feed(to_event(sampler.sample_once()))

    saved = engine.emit
    apply_levers(engine, {})
    engine.emit = emit
    try:
        session.feed(engine.ready)
        req = RunRequest(preset="short", max_new_tokens=8, ignore_eos=True)
        assert engine.run(req) is not None
        sent = []

        def poll():
            if steps[0] == 3 and not sent:
                sent.append(1)
                return [SetLever("quant", "int8")]
            return []

        assert engine.run(req, poll) is not None
    finally:
        engine.emit = saved
        recorder.close()
        apply_levers(engine, {})
    return path, session


@pytest.fixture(scope="module")
def bench_json(engine, tmp_path_factory):
    """`tokentop bench --levers plain,int8 --lengths 8:4,24:4 --repeats 2 --warmup 0 -o json`, in this process."""
    from tui_app.commands.bench import apply_levers, environment, measure, parse_lengths, parse_levers, write_outputs
    from tui_app.core.session import Session

    out = tmp_path_factory.mktemp("bench") / "bench"
    args = argparse.Namespace(levers="plain,int8", lengths="8:4,24:4", warmup=0, repeats=2, output=["json"], out=str(out))
    session = Session()
    saved = engine.emit
    engine.emit = session.feed
    try:
        results = [
            measure(engine, session, [], name, combo, p, n, args.warmup, args.repeats, lambda: None)
            for p, n in parse_lengths(args.lengths)
            for name, combo in parse_levers(args.levers)
        ]
    finally:
        engine.emit = saved
        apply_levers(engine, {})
    write_outputs(args, environment(engine), results)
    return f"{out}.json"


class Page(HTMLParser):
    """What a test needs of the report: figures (and the SVG elements in each), tables as cell text,
    and every attribute that could load something."""

    def __init__(self, text: str):
        super().__init__()
        self.figures: dict[str, dict] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[str] = []
        self.scripts = 0
        self._figure = None
        self._table = None
        self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href", "xlink:href"):
            if k in a:
                self.links.append(a[k])
        if tag == "script":
            self.scripts += 1
        if tag == "figure":
            self._figure = self.figures.setdefault(a["id"], {"svg": 0, "drawn": 0, "caption": ""})
        elif self._figure is not None:
            if tag == "svg":
                self._figure["svg"] += 1
            elif tag in ("path", "use", "rect", "line", "polyline"):
                self._figure["drawn"] += 1
            elif tag == "figcaption":
                self._cell = []
        if tag == "table":
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag == "figcaption" and self._figure is not None:
            self._figure["caption"] = "".join(self._cell)
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._table is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def make_report(tmp_path, src, capsys, *extra):
    out = tmp_path / "report.html"
    code = main(["report", str(src), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return Page(out.read_text(encoding="utf-8")), err


def assert_self_contained(page: Page, names):
    assert set(page.figures) == set(names)
    for name, f in page.figures.items():
        assert f["svg"] == 1 and f["drawn"] > 20, (name, f)
    assert page.scripts == 0
    # Only references inside the page itself (the SVGs' own defs); nothing to fetch.
    assert all(link.startswith("#") for link in page.links), [x for x in page.links if not x.startswith("#")]


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def expected_rows(events) -> dict[int, dict]:
    """The runs table's numbers per run, from the raw events with numpy: TTFT from the run's start to
    its prefill's end, ITL percentiles over decode tokens, decode tok/s, KV after the last step."""
    runs: dict[int, dict] = {}
    for ev in events:
        if isinstance(ev, RunStarted):
            runs[ev.run_id] = {"t0": ev.t_ns, "itl": [], "decode_ns": 0, "decode_tok": 0, "new": 0, "prompt": ev.prompt_tokens}
        elif isinstance(ev, Step):
            r = runs[ev.run_id]
            r["new"] += ev.n_tokens
            r["kv"] = ev.kv_bytes
            if ev.kind == "prefill":
                r["ttft"] = (ev.t_ns - r["t0"]) / 1e9
            elif ev.kind in ("decode", "verify"):
                r["itl"] += [ev.dt_ns / 1e9 / ev.n_tokens] * ev.n_tokens
                r["decode_ns"] += ev.dt_ns
                r["decode_tok"] += ev.n_tokens
        elif isinstance(ev, RunFinished):
            runs[ev.run_id]["rss"] = ev.peak_rss
    return runs


def test_a_session_report_holds_every_figure_and_the_runs_table_of_the_session(recorded, tmp_path, capsys):
    path, live = recorded
    page, _ = make_report(tmp_path, path, capsys, "--png", str(tmp_path / "png"))
    assert_self_contained(page, SESSION_FIGURES)
    events = read_recording(path).events
    table = page.tables["runs"]
    head, body = table[0], table[1:]
    from tui_app.core.columns import columns_for

    columns = columns_for(live.rows())
    assert head == [c.title for c in columns]
    # The same cells as the app's table over the live session: the recording loses nothing.
    assert body == [[c.cell(r) for c in columns] for r in live.rows()]
    col = {t: i for i, t in enumerate(head)}
    by_run = {row[col["run"]]: row for row in body}
    # Run numbers are the shared engine's (it has run other tests' runs before): the recording's two.
    first, second = sorted({ev.run_id for ev in events if isinstance(ev, RunStarted)})
    assert set(by_run) >= {f"{first}", f"{second}", f"{second}.0", f"{second}.1"}  # the second run's lever segments have rows of their own
    assert by_run[f"{second}.1"][col["levers"]] == "cache int8" and by_run[f"{second}.0"][col["levers"]] == "cache"
    for rid, want in expected_rows(events).items():
        row = by_run[str(rid)]
        assert row[col["new"]] == str(want["new"]) == "8"
        assert row[col["prompt"]] == str(want["prompt"])
        assert row[col["TTFT ms"]] == f"{want['ttft'] * 1000:.0f}"
        assert row[col["ITL p50"]] == f"{np.percentile(want['itl'], 50) * 1000:.1f}"
        assert row[col["p95"]] == f"{np.percentile(want['itl'], 95) * 1000:.1f}"
        assert row[col["p99"]] == f"{np.percentile(want['itl'], 99) * 1000:.1f}"
        assert row[col["tok/s"]] == f"{want['decode_tok'] / (want['decode_ns'] / 1e9):.1f}"
        assert row[col["KV MiB"]] == f"{want['kv'] / 2**20:.1f}"
        assert row[col["RSS MiB"]] == f"{want['rss'] / 2**20:.1f}"
    captions = {name: f["caption"] for name, f in page.figures.items()}
    assert "1 re-prefill " in captions["latency"]
    assert "largest difference 0 B" in captions["kv"]  # measured KV bytes equal the formula at every step
    n_samples = sum(1 for e in events if type(e).__name__ == "Sampled")
    assert n_samples >= 6 and f"from {n_samples} sampler readings" in captions["utilization"]
    # the int8 switch measured the int8 weights' read; the decode steps after it are drawn against it
    bw = next(e for e in events if type(e).__name__ == "Bandwidth")
    assert bw.quant == "int8" and "mem bw%: the bytes decode steps read" in captions["utilization"]
    assert f"({bw.read_bps / 1e9:.1f} GB/s when last measured)" in captions["utilization"]
    # Two runs are too few for a trend (whether int8 was prepared in run 2 or by an earlier test).
    assert live.verdict.status == "collecting" and live.verdict.text() in captions["memory"]
    for name in SESSION_FIGURES:
        w, h = png_size(tmp_path / "png" / f"{name}.png")
        assert w >= 1000 and h >= 300


def test_a_bench_report_plots_each_lever_and_its_ratio_to_plain(bench_json, tmp_path, capsys):
    page, _ = make_report(tmp_path, bench_json, capsys)
    assert_self_contained(page, BENCH_FIGURES)
    rows = json.loads(Path(bench_json).read_text(encoding="utf-8"))["results"]
    table = page.tables["results"]
    head, body = table[0], table[1:]
    assert len(body) == len(rows) == 4
    plain = {r["prompt_tokens"]: r for r in rows if r["levers"] == "plain"}
    for cells, r in zip(body, rows, strict=True):
        assert cells[0] == r["levers"] and cells[1] == f"{r['prompt_tokens']}→4"
        assert cells[2] == " / ".join(f"{r[f'ttft_{q}'] * 1000:.1f}" for q in ("p50", "p95", "p99"))
        assert cells[3] == " / ".join(f"{r[f'itl_{q}'] * 1000:.2f}" for q in ("p50", "p95", "p99"))
        assert cells[4] == f"{r['tps_mean']:.1f}"
        assert cells[head.index("×plain")] == f"{r['tps_mean'] / plain[r['prompt_tokens']]['tps_mean']:.2f}"


def test_a_recording_with_event_types_it_cannot_draw_is_reported_without_them(recorded, tmp_path, capsys):
    path, live = recorded
    lines = path.read_text().splitlines()
    # An event type from a newer tokentop between two steps: skipped and said, the rest drawn.
    lines.insert(5, json.dumps({"type": "FutureEvent", "t_ns": 1, "queue": 3}))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(lines) + "\n")
    page, err = make_report(tmp_path, mixed, capsys)
    assert "1 FutureEvent" in err
    assert_self_contained(page, SESSION_FIGURES)
    from tui_app.core.columns import columns_for

    assert page.tables["runs"][1:] == [[c.cell(r) for c in columns_for(live.rows())] for r in live.rows()]


def test_a_recording_cut_short_by_a_crash_is_reported_up_to_the_cut(recorded, tmp_path, capsys):
    path, _ = recorded
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(path.read_bytes()[:-40])
    page, err = make_report(tmp_path, cut, capsys)
    assert "the last, was cut short mid-write" in err and err.count("\n") == 2  # the cut, then "wrote"
    assert_self_contained(page, SESSION_FIGURES)


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "cannot read"),
        (b"", "holds no tokentop events"),
        (b"hello\nworld\n", "not a tokentop recording"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"[1, 2, 3]", "neither a tokentop recording nor"),
        (b'{"settings": {}, "env": 1}', "neither a tokentop recording nor"),
        (b'{"results": [{"x": 1}]}', "lack levers"),
        (b'{"type": "Step", "run_id"\n', "not a tokentop recording"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, needle):
    src = tmp_path / "in.jsonl"
    if content is not None:
        src.write_bytes(content)
    out = tmp_path / "r.html"
    code = main(["report", str(src), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") <= 2 and needle in err, err
    assert "Traceback" not in err


def test_the_report_is_the_only_command_that_imports_matplotlib():
    code = "import sys, tui_app.cli as c; c.build_parser(); print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.skipif(browser.unavailable() is not None, reason=str(browser.unavailable()))
def test_both_reports_render_in_chromium_offline_with_no_console_error(recorded, bench_json, tmp_path, capsys):
    with browser.chromium() as chrome:
        for name, src in (("session", recorded[0]), ("bench", bench_json)):
            make_report(tmp_path, src, capsys)
            html_path = tmp_path / f"{name}.html"
            (tmp_path / "report.html").rename(html_path)
            png = tmp_path / f"{name}.png"
            visit = browser.render_file(chrome, str(html_path), str(png))
            assert visit.console_errors == [] and visit.page_errors == [] and visit.blocked == [], visit
            w, h = png_size(png)
            assert w == 1200 and h > 1500  # the whole page: every figure and the table, one under the other


def test_the_memory_figure_draws_the_leak_detectors_trend_and_interval_as_scipy_fits_them():
    """A rising baseline over 12 runs (a deterministic session; the drawing is what is checked):
    the trend line and its 95 % interval are the least-squares fit scipy makes of the same baselines."""
    from scipy import stats

    from monitors.events import RunFinished as Finished
    from tests.helpers.synthetic import session_events
    from tui_app.commands.report.session import memory_figure
    from tui_app.core.session import Session

    events = session_events(runs=12, tokens=6)
    finished = [e for e in events if isinstance(e, Finished)]
    for k, f in enumerate(finished):
        f.baseline_rss += (k * 7 % 5) * 2**18  # jitter, so that the interval has a width
    session = Session.from_events(events)
    assert session.verdict.status == "suspected"
    fig = memory_figure(session).fig
    trend_ax = fig.axes[1]
    lines = {ln.get_label(): ln for ln in trend_ax.lines}
    series = [f.baseline_rss / 2**20 for f in finished][3:]  # after the detector's 3 warm-up runs
    fit = stats.linregress(range(len(series)), series)
    half = stats.t.ppf(0.975, len(series) - 2) * fit.stderr
    trend = lines["leak trend"]
    assert list(trend.get_xdata()) == [finished[3].run_id, finished[-1].run_id]  # a straight line: its two ends
    assert np.allclose(trend.get_ydata(), [fit.intercept, fit.intercept + fit.slope * (len(series) - 1)])
    band = [ln for ln in trend_ax.lines if ln.get_linestyle() == ":" and ln.get_color() == trend.get_color()]
    slopes = sorted((ln.get_ydata()[-1] - ln.get_ydata()[0]) / (len(series) - 1) for ln in band)
    assert np.allclose(slopes, [fit.slope - half, fit.slope + half], rtol=1e-3)


def test_a_long_session_keeps_every_run_and_drops_the_words_that_would_overlap(tmp_path, capsys):
    from tests.helpers.synthetic import session_events

    path = tmp_path / "long.jsonl"
    rec = Recorder(path)
    for ev in session_events(runs=40, tokens=4):
        rec.write(ev)
    rec.close()
    page, _ = make_report(tmp_path, path, capsys)
    assert_self_contained(page, SESSION_FIGURES)
    assert [row[0] for row in page.tables["runs"][1:] if "." not in row[0]] == [str(i) for i in range(1, 41)]


def test_an_moe_sessions_report_draws_its_experts_and_each_runs_load(tmp_path, capsys):
    """A small random-weight Qwen3-MoE's two runs, recorded: the heatmap of the last run and a row a
    run, whose figures are monitors/routing.py's of the recorded counts."""
    from monitors.routing import imbalance
    from tests.helpers.tiny_models import save_moe
    from tui_app.engine.config import EngineConfig
    from tui_app.engine.generation import Engine
    from tui_app.requests import RunRequest

    save_moe("qwen3moe", tmp_path / "m")
    path = tmp_path / "moe.jsonl"
    recorder = Recorder(path)
    engine = Engine(EngineConfig(model=str(tmp_path / "m")), recorder.write)
    engine.load()
    done = [engine.run(RunRequest(preset=p, max_new_tokens=6, ignore_eos=True)) for p in ("short", "long")]
    recorder.close()
    page, _ = make_report(tmp_path, path, capsys)
    assert_self_contained(page, {*SESSION_FIGURES, "experts"})
    rows = page.tables["experts"][1:]
    assert [row[0] for row in rows] == [str(d.run_id) for d in done] and all(row[1] == "3 × 8" for row in rows)
    for row, fin in zip(rows, done, strict=True):
        each = [imbalance(layer) for layer in fin.expert_counts]
        assert row[2] == f"{sum(each) / len(each):.2f}"
