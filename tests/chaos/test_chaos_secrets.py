"""A password or token inside a server's URL or its Prometheus URL (`http://user:key@host`) is never
shown, logged, recorded or written to a file: every output, the recording, the export, the bench
table and the logs are searched for it, on the way that works and on the ways that fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from monitors.record import Recorder
from monitors.redact import redact
from tests.ui.test_app import APP_SIZE, finished, notes, status_text, until
from tui_app.attach.client import AttachConfig
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp

pytestmark = pytest.mark.chaos
KEY = "sk-chaos-5e3f9a7c"
TOKEN = "prom-token-81b2d4"


def with_secret(url: str, path: str = "") -> str:
    return url.replace("http://", f"http://tokentop:{KEY}@") + path


def tokentop(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui_app", *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def assert_secret_free(*texts: str) -> None:
    for text in texts:
        assert KEY not in text and TOKEN not in text


def test_the_shared_redaction():
    assert redact("https://user:key@host:8000/v1") == "https://user:***@host:8000/v1"
    assert redact("see http://TOKEN@h/metrics, and http://a:p@ss@h/x") == "see http://***@h/metrics, and http://a:***@h/x"
    assert redact("mailto:bob@example.org http://host/v1") == "mailto:bob@example.org http://host/v1"


def test_headless_attach_and_bench_never_say_the_key(llama_server, tmp_path):
    rec = tmp_path / "r.jsonl"
    metrics = llama_server.url.replace("http://", f"http://{TOKEN}@") + "/metrics"
    out = tokentop("attach", with_secret(llama_server.url), "--metrics", metrics, "--no-tui", "--max-new-tokens", "6", "--record", str(rec))
    assert out.returncode == 0, out.stderr
    assert f"server at {with_secret(llama_server.url).replace(KEY, '***')}" in out.stdout and "metrics http://***@" in out.stdout
    assert_secret_free(out.stdout, out.stderr, rec.read_text())
    assert '"url":"http://tokentop:***@127.0.0.1' in rec.read_text()  # recorded, and redacted

    failures = [
        tokentop("attach", with_secret("http://127.0.0.1:1"), "--no-tui", "--no-record"),  # nobody listening
        tokentop("attach", with_secret(llama_server.url, "/not-here"), "--no-tui", "--no-record"),  # not an API at that path
        tokentop("attach", with_secret("ftp://127.0.0.1:1"), "--no-tui", "--no-record"),  # not http
        tokentop("attach", with_secret(llama_server.url), "--metrics", metrics.replace("/metrics", "/no-metrics"), "--no-tui", "--no-record"),
    ]
    for failed in failures:
        assert "Traceback" not in failed.stderr and failed.stderr.strip()
        assert_secret_free(failed.stdout, failed.stderr)
    assert "http://tokentop:***@127.0.0.1" in failures[1].stderr and "no Prometheus metrics at http://***@127.0.0.1" in failures[3].stderr

    sweep = ("--lengths", "24:4", "--concurrency", "1", "--repeats", "1", "--warmup", "0")
    out = tokentop("bench", "--endpoint", with_secret(llama_server.url), *sweep, "-o", "json", "-o", "csv", "--out", str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    data = (tmp_path / "b.json").read_text()
    assert_secret_free(out.stdout, out.stderr, data, (tmp_path / "b.csv").read_text())
    assert json.loads(data)["environment"]["settings"]["endpoint"] == [with_secret(llama_server.url).replace(KEY, "***")]


async def test_the_tui_its_export_screenshot_recording_and_log_never_say_the_key(llama_server, tmp_path):
    log = tmp_path / "attach.log"
    rec = tmp_path / "r.jsonl"
    source = AttachSource([AttachConfig(url=with_secret(llama_server.url), metrics_url=f"http://{TOKEN}@127.0.0.1:{llama_server.port}/metrics")], str(log))
    app = TokentopApp(source, RunRequest(max_new_tokens=6), recorder=Recorder(rec), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=60, what="a run")
        await pilot.press("e")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(list(tmp_path.glob("tokentop-*"))) == 2, what="the export and the screenshot")
        assert "tokentop:***@127.0.0.1" in app.sub_title
        shown = [status_text(app), app.sub_title, app.title, *notes(app), *(text for text, *_ in app.tokens.chunks)]
        await pilot.press("q")
    written = [p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file()]
    assert len(written) == 4  # the export, the screenshot, the recording, the client's log
    assert_secret_free(*shown, *written)
