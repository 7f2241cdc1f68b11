"""An attached server's expert load, a run at a time (`attach --expert-dir`, tui_app/attach/experts.py).
Neither SGLang nor lmdeploy runs here: the SSE stand-in serves each one's recorder endpoints and
writes its dump's layout with torch.save (tests/helpers/expert_recorder.py), and beside each dump
torch's own sum of it, which each run's counts are held against."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from monitors.events import EngineError
from tests.helpers.expert_recorder import EXPERTS, LAYERS, PROMPT_POSITIONS, TOP_K
from tests.helpers.sse_standin import SseStandIn
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.commands.report.experts import counted_by
from tui_app.core.session import Session
from tui_app.requests import RunRequest
from tui_app.ui.screens.experts import render

NEW = 16
ROUTINGS = (PROMPT_POSITIONS + NEW - 1) * TOP_K  # a layer's: the prompt and all but the last token forwarded


NAMES = {"sglang": "SGLang", "lmdeploy": "lmdeploy"}


@pytest.fixture(scope="module", params=list(NAMES))
def standin(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("recorder")
    server = SseStandIn(gap_ms=2, experts=str(folder), recorder=request.param)
    server.kind = request.param
    yield server, folder
    server.close()


@pytest.fixture
def recorder(standin):
    server, folder = standin
    for old in folder.iterdir():
        old.unlink()
    return server, folder


def attach(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tui_app", "attach", *args, "--completions", "--no-tui", "--no-record", "--max-new-tokens", str(NEW)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_each_runs_counts_are_the_servers_dump_read_without_torch(recorder):
    server, folder = recorder
    out = attach(server.url, "--expert-dir", str(folder), "-o", "json", "--runs", "2")
    assert out.returncode == 0, out.stderr
    runs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    truth = [json.loads(p.read_text()) for p in sorted(folder.glob("standin-*.json"), key=lambda p: float(p.stem.split("-", 1)[1]))]
    assert len(runs) == len(truth) == 2
    assert [r["expert_counts"] for r in runs] == [t["counts"] for t in truth]
    assert all(len(r["expert_counts"]) == LAYERS and all(sum(layer) == ROUTINGS for layer in r["expert_counts"]) for r in runs)
    assert not list(folder.glob("*.pt")), "the dumps tokentop asked for are read and deleted"
    line = attach(server.url, "--expert-dir", str(folder), "--runs", "1").stdout
    assert "experts max/mean" in line, line


async def test_the_expert_pane_draws_the_servers_load_and_names_it(recorder):
    server, folder = recorder
    session = Session()
    client = ServerClient(AttachConfig(url=server.url, chat=False, expert_dir=str(folder)), session.feed)
    await client.connect()
    assert "no run yet" in render(session, 120, 30, "run").plain
    finished = await client.run(RunRequest(prompt="hello", max_new_tokens=NEW))
    await client.aclose()
    assert finished is not None and session.experts.run == finished.expert_counts
    shown = render(session, 120, 30, "run").plain
    name = NAMES[server.kind]
    assert f"Experts ({name}'s recorder: every client's requests over the run's span): {LAYERS} MoE layers × {EXPERTS} routed experts\n" in shown
    assert f"{ROUTINGS} routings (positions × top-k) a layer over {NEW} forward passes" in shown, shown
    assert shown.count("max/mean") == LAYERS and "hottest: " in shown
    assert counted_by(session) == f"as {name}'s expert recorder counted them: every client's requests over the run's span"  # the report's caption


def test_a_folder_the_server_does_not_write_is_said_once_and_the_runs_go_on(recorder, tmp_path):
    server, _ = recorder
    out = attach(server.url, "--expert-dir", str(tmp_path), "--runs", "2")
    assert out.returncode == 0 and out.stdout.count("run ") >= 2, out.stdout + out.stderr
    said = [line for line in out.stderr.splitlines() if "expert load:" in line]
    files = {"sglang": "expert_distribution_recorder_*.pt", "lmdeploy": "rank*_expert_counts.pt"}[server.kind]
    assert len(said) == 1 and f"no {files} appeared in" in said[0], out.stderr
    assert "Traceback" not in out.stderr


async def test_a_server_without_the_recorder_says_so_and_the_pane_says_why():
    server = SseStandIn(gap_ms=2)
    try:
        session = Session()
        errors: list = []
        client = ServerClient(AttachConfig(url=server.url, chat=False, expert_dir="/tmp"), lambda ev: (session.feed(ev), errors.append(ev)))
        await client.connect()
        finished = await client.run(RunRequest(prompt="hello", max_new_tokens=4))
        await client.aclose()
    finally:
        server.close()
    said = [ev.message for ev in errors if isinstance(ev, EngineError)]
    assert said == ["--expert-dir: OpenAI-compatible has no expert load tokentop reads (SGLang's or lmdeploy's recorder); left out"]
    assert finished is not None and finished.expert_counts is None
    assert "no expert pane: OpenAI-compatible exposes no expert load that tokentop reads" in render(session, 120, 30, "run").plain


def test_an_lmdeploy_whose_recorder_is_off_is_said_once_and_the_runs_go_on(tmp_path):
    """lmdeploy's no-op recorder takes both requests and names no file: said, not waited for."""
    server = SseStandIn(gap_ms=2, experts=str(tmp_path), recorder="lmdeploy-off")
    try:
        out = attach(server.url, "--expert-dir", str(tmp_path), "--runs", "2", "-o", "json")
    finally:
        server.close()
    assert out.returncode == 0 and [json.loads(x)["expert_counts"] for x in out.stdout.splitlines() if x.startswith("{")] == [None, None]
    said = [line for line in out.stderr.splitlines() if "expert load:" in line]
    assert len(said) == 1 and "the server wrote no dump: is it a build with the expert recorder" in said[0], out.stderr
    assert "LMDEPLOY_DUMP_EXPERT_DISTRIBUTION=1" in said[0] and "Traceback" not in out.stderr


def test_a_folder_that_is_not_here_is_one_line(tmp_path):
    out = attach("http://127.0.0.1:9", "--expert-dir", str(tmp_path / "absent"))
    assert out.returncode == 2 and "--expert-dir" in out.stderr and "no such folder here" in out.stderr
    assert "Traceback" not in out.stderr
