"""`tokentop bench --endpoint --live` on the real llama.cpp server: the attach TUI fed by the bench's
own requests, its progress (a bar, the cell, the time left) in the status line, the app closing
itself when the bench ends and the tables printed after it; without a terminal, a line per cell."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.ui.test_app import APP_SIZE, status_text, until
from tui_app.cli import serving_bench_parser
from tui_app.commands.serving import BenchSource, Job, Options, bench_process
from tui_app.core.options import from_namespace
from tui_app.ui.bench_app import BenchApp
from tui_app.ui.widgets.runs_table import RunsTable

SWEEP = ("--lengths", "12:4", "--concurrency", "2", "--requests", "4", "--repeats", "2", "--warmup", "0")


async def test_the_live_view_shows_the_bench_and_closes_with_its_tables(llama_server, tmp_path, capsys):
    opts = from_namespace(Options, serving_bench_parser().parse_args(["--endpoint", llama_server.url, "--label", "L", *SWEEP, "--live"]))
    job = Job(opts, [[12, 4]], str(tmp_path / "tables.md"), str(tmp_path / "status.json"))
    source = BenchSource(job, str(tmp_path / "bench.log"), target=bench_process)
    app = BenchApp(source, None, fps=8, out_dir=str(tmp_path))
    seen: list[str] = []
    try:
        async with app.run_test(size=APP_SIZE) as pilot:
            await until(pilot, lambda: "bench [" in status_text(app), timeout=60, what="the bench's progress")
            seen.append(status_text(app))
            await until(pilot, lambda: len(app.session.finished_ids) >= 4, timeout=90, what="the bench's requests in the runs table")
            table = app.query_one(RunsTable)
            table.dirty = True
            table.redraw(force=True)
            seen.append("\n".join(strip.text for strip in table._strips))
            await until(pilot, lambda: not app.is_running, timeout=120, what="the app closing itself at the bench's end")
    finally:
        source.close()
    assert app.return_code == 0 and source.bench_code() == 0
    # Its progress mid-bench or, where the UI drew no frame before the bench's end (a loaded
    # machine, a bench of a second or two), the full bar it ended with.
    assert re.search(r"cell 1/1 c2 12:4 \d+/8, (~[^,]+ left|done: the tables follow)", seen[0]), seen[0]
    assert app.state == f"bench [{'█' * 24}] cell 1/1 c2 12:4 8/8, done: the tables follow when the TUI closes"  # its last picture
    assert "L c1" in seen[1]  # each of the bench's requests is one stream to server L
    printed = capsys.readouterr().out
    # the shared server's prefix cache may hold a token or two of the prompt from earlier tests
    assert re.search(r"\| L \| c2 \| 12( \(\d+ cached\))?→4 \| 8 \|", printed), printed
    assert "With 95 % intervals over the rounds" in printed


def test_without_a_terminal_live_says_so_and_prints_a_line_per_cell(llama_server, tmp_path):
    cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", llama_server.url, *SWEEP, "--concurrency", "1,2", "--live"]
    out = subprocess.run([*cmd, "-o", "json", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0] == "tokentop: --live: no terminal here, so no TUI; a progress line per cell on stderr instead"
    cells = [line for line in lines if line.startswith("tokentop: cell ")]
    assert [c.split(":")[1].split()[1] for c in cells] == ["1/2", "2/2"] and all(" left" in c for c in cells)
    assert len(json.loads((tmp_path / "b.json").read_text())["results"]) == 2
