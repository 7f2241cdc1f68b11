"""Attach's bad input and faults: each one clear line, the session goes on, nothing recorded lost,
the API key never printed, logged or recorded. Real llama.cpp servers where a real server can show
the fault; a small misbehaving HTTP server (aiohttp) for what no real server does on purpose:
malformed stream lines, an error object mid-stream, a stream that stalls."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from aiohttp import web

from monitors.events import EngineError, ServerSample
from tests.helpers.llama_server import LlamaServer
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.attach.discover import find_servers
from tui_app.attach.errors import AttachError
from tui_app.core.session import Session
from tui_app.requests import RunRequest

REQ = RunRequest(prompt="Hi.", max_new_tokens=8)


def client_for(url: str, **options) -> tuple[ServerClient, list]:
    events: list = []
    return ServerClient(AttachConfig(url=url, **options), events.append), events


async def stream_once(url: str, **options):
    """One run of REQ on a fresh client: (RunFinished, the error lines it said)."""
    client, events = client_for(url, **options)
    try:
        await client.connect()
        fin = await client.run(REQ)
    finally:
        await client.aclose()
    return fin, [e.message for e in events if isinstance(e, EngineError)]


async def connect_error(url: str, **options) -> str:
    client, _ = client_for(url, **options)
    try:
        with pytest.raises(AttachError) as err:
            await client.connect()
    finally:
        await client.aclose()
    return str(err.value)


async def test_unreachable_port_says_connection_refused():
    msg = await connect_error("http://127.0.0.1:1")
    assert "cannot reach 127.0.0.1:1: connection refused" in msg


async def test_a_web_page_is_not_an_openai_api(tmp_path, unused_tcp_port):
    (tmp_path / "index.html").write_text("<html>hello</html>")
    (tmp_path / "v1").mkdir()
    web_server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(unused_tcp_port), "--bind", "127.0.0.1", "-d", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        msg = ""
        for _ in range(100):  # until it listens
            msg = await connect_error(f"http://127.0.0.1:{unused_tcp_port}")
            if "connection refused" not in msg:
                break
            await asyncio.sleep(0.1)
        assert "answered 404 to GET /v1/models: not an OpenAI-compatible API" in msg
        (tmp_path / "v1" / "models").write_text("<html>not json</html>")
        msg = await connect_error(f"http://127.0.0.1:{unused_tcp_port}")
        assert "not a model list: not an OpenAI-compatible API" in msg
    finally:
        web_server.kill()
        web_server.wait()


async def test_a_model_the_server_does_not_have(llama_server):
    msg = await connect_error(llama_server.url, model="gpt-17")
    assert msg.endswith("has no model 'gpt-17'; it serves: smollm2")


async def test_api_key_missing_or_wrong_then_right_and_never_shown(tmp_path):
    key = "sk-tokentop-test-5f1e2d"
    server = LlamaServer("--api-key-env", "TT_KEY", env={"TT_KEY": key})
    try:
        assert "answered 401 to GET /v1/models: the API key is missing or wrong" in await connect_error(server.url)
        os.environ["TT_WRONG"] = "sk-wrong"
        try:
            assert "answered 401" in await connect_error(server.url, api_key_env="TT_WRONG")
        finally:
            del os.environ["TT_WRONG"]
        record = tmp_path / "rec.jsonl"
        out = subprocess.run(
            [sys.executable, "-m", "tui_app", "attach", server.url, "--no-tui", "--api-key-env", "TT_KEY", "--max-new-tokens", "6", "--record", str(record)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TT_KEY": key},
        )
        assert out.returncode == 0, out.stderr
        assert "run 1" in out.stdout
        for text in (out.stdout, out.stderr, record.read_text()):
            assert key not in text
    finally:
        server.close()


async def test_a_server_without_metrics_says_how_to_turn_them_on_and_runs_go_on():
    server = LlamaServer("--no-metrics")
    client, events = client_for(server.url)
    try:
        ready = await client.connect()
        assert ready.device == "llama.cpp"  # told by /props when there are no metric names
        await client.sample()
        await client.sample()  # said once, not every scrape
        fin = await client.run(REQ)
    finally:
        await client.aclose()
        server.close()
    said = [e.error for e in events if isinstance(e, ServerSample) and e.error]
    assert said == [f"no Prometheus metrics at {server.url}/metrics: start llama-server with --metrics"]
    assert fin.stop_reason in ("eos", "max tokens") and fin.n_tokens > 0


async def test_server_killed_mid_stream_then_back_on_the_same_port():
    server = LlamaServer()
    session = Session()
    events: list = []
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=server.url, timeout_s=10), session.feed)
    try:
        await client.connect()
        run = asyncio.create_task(client.run(RunRequest(prompt="Write a long essay about rivers.", max_new_tokens=400, ignore_eos=True)))
        while not session.latency:  # tokens are flowing
            await asyncio.sleep(0.05)
        server.kill()
        fin = await run
        assert fin.stop_reason == "error"
        assert 0 < session.timer.runs[fin.run_id].total.n_tokens < 400  # the tokens that came are kept
        errors = [e.message for e in events if isinstance(e, EngineError)]
        assert errors == [f"127.0.0.1:{server.port} closed the connection mid-stream (the server stopped, or the network dropped it)"]
        fin = await client.run(REQ)  # nobody listening now
        assert fin.stop_reason == "error"
        assert "connection refused" in [e.message for e in events if isinstance(e, EngineError)][-1]
        server = LlamaServer("--port", str(server.port))  # it comes back
        fin = await client.run(REQ)
        assert fin.stop_reason in ("eos", "max tokens") and fin.n_tokens > 0
        assert [r.run_id for r in session.rows()] == [1, 2, 3]
    finally:
        await client.aclose()
        server.close()


async def fault_server(port: int, script: list, ssl_context=None) -> web.AppRunner:
    """A small HTTP server whose /v1/chat/completions streams what `script` holds (a float: a pause)."""

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for item in script:
            if isinstance(item, float):
                await asyncio.sleep(item)
            else:
                await resp.write(f"data: {item}\n\n".encode())
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    return runner


@pytest.fixture
async def misbehaving(unused_tcp_port):
    script: list = []
    runner = await fault_server(unused_tcp_port, script)
    yield f"http://127.0.0.1:{unused_tcp_port}", script
    await runner.cleanup()


def chunk(text: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


async def test_malformed_lines_are_skipped_and_said_once(misbehaving):
    url, script = misbehaving
    script += [chunk("a"), "{not json", "[1, 2]", chunk("b"), "[DONE]"]
    fin, errors = await stream_once(url)
    assert fin.text == "ab" and fin.n_tokens == 2
    assert fin.server["tokens_from"] == "chunks (the server streams no running count)"
    assert errors == ["2 stream line(s) were not JSON and were skipped"]


async def test_an_error_object_mid_stream_ends_the_run_with_its_message(misbehaving):
    url, script = misbehaving
    script += [chunk("a"), json.dumps({"error": {"message": "KV cache exhausted", "code": 507}})]
    fin, errors = await stream_once(url)
    assert fin.stop_reason == "error" and fin.text == "a"
    assert errors == ["the server sent an error mid-stream: KV cache exhausted"]


async def test_a_stalled_stream_times_out_with_the_time_waited(misbehaving):
    url, script = misbehaving
    script += [chunk("a"), 5.0, chunk("b")]
    fin, errors = await stream_once(url, timeout_s=0.5)
    assert fin.stop_reason == "error" and fin.text == "a"
    assert errors == [f"127.0.0.1:{url.rsplit(':', 1)[1]} sent nothing for 0.5 s: the stream stalled (--timeout sets the limit)"]


@pytest.mark.serial
def test_discovery_finds_the_running_server(llama_server):
    found, tried = find_servers()
    assert (f"http://127.0.0.1:{llama_server.port}", ["smollm2"]) in found
    assert "http://127.0.0.1:8000" in tried and "http://127.0.0.1:11434" in tried


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["attach", "http://127.0.0.1:1", "--no-tui"], "cannot reach 127.0.0.1:1: connection refused"),
        (["attach", "ftp://x", "--no-tui"], "is not an http(s) URL"),
        (
            ["attach", "http://127.0.0.1:1", "--api-key-env", "TT_NOT_SET_ANYWHERE", "--no-tui"],
            "--api-key-env TT_NOT_SET_ANYWHERE: that environment variable is not set",
        ),
    ],
)
def test_cli_bad_input_is_one_line(argv, needle, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tui_app", *argv, "--no-record"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert needle in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


async def test_a_self_signed_certificate_is_refused_until_insecure(tmp_path, unused_tcp_port):
    import ssl

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        capture_output=True,
    )
    assert made.returncode == 0, made.stderr
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    runner = await fault_server(unused_tcp_port, [chunk("hi"), "[DONE]"], ssl_context=ctx)
    url = f"https://127.0.0.1:{unused_tcp_port}"
    try:
        assert "its TLS certificate is not trusted (self-signed?); pass --insecure to accept it" in await connect_error(url)
        fin, _ = await stream_once(url, insecure=True)
        assert fin.text == "hi"
    finally:
        await runner.cleanup()
