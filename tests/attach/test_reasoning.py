"""A reasoning model's phases against the real llama.cpp server (xllamacpp): a server-wide grammar
makes every answer a think span then text, and this build leaves the tags in `content`, the path
users meet with a server that runs no reasoning parser. The raw stream, read by the test itself
through a proxy that stamps each read, is the independent reference for the split and the clocks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from monitors.events import THINK_BUDGETS, LeverChanged, Levers, Step
from monitors.record import Recorder, read_recording
from monitors.servers import LLAMACPP, SGLANG, VLLM
from tests.helpers.llama_server import LlamaServer
from tests.helpers.proxy import as_raw, tapped_run
from tests.helpers.sse_standin import SseStandIn, reasoning_chunks
from tui_app.attach.client import lever_answer
from tui_app.core.session import Session
from tui_app.requests import RunRequest

GRAMMAR = 'root ::= "<think>" [a-z ]{30,60} "</think>" [A-Za-z0-9 ]{8,400}'  # an answer long enough for a fixed-length request
PROMPT = "Why is the sky blue?"


@pytest.fixture(scope="module")
def thinking_server():
    server = LlamaServer("--grammar", GRAMMAR, "--slots", "1")
    yield server
    server.close()


@pytest.mark.serial  # two clocks of the same moments compared to 2 %: a loaded machine delays one reader
async def test_the_split_and_ttfa_equal_those_read_from_the_raw_stream(thinking_server, tmp_path):
    events: list = []
    recorder = Recorder(str(tmp_path / "r.jsonl"))
    session = Session(recorder=recorder)
    session.listeners.append(events.append)
    fin, posted, tapped = await tapped_run(thinking_server.port, session, RunRequest(prompt=PROMPT, max_new_tokens=120))
    recorder.close()
    chunks = [(t, text) for t, _, text, _ in tapped]
    text = "".join(c for _, c in chunks)
    assert text.startswith("<think>") and "</think>" in text and fin.text == text
    # The test's own split: a chunk a token (this server streams no running count), thinking up to
    # the chunk that ends the closing tag, the answer after it.
    closed = next(i for i in range(len(chunks)) if "</think>" in "".join(c for _, c in chunks[: i + 1]))
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": closed + 1, "answer": len(chunks) - closed - 1}
    assert fin.n_tokens == fin.server["server_tokens"] >= len(chunks)  # the server counts the grammar's end too
    steps = [e for e in events if isinstance(e, Step)]
    assert "".join(s.text for s in steps if s.phase == "thinking") == text[: text.index("</think>") + len("</think>")]
    # TTFT and TTFA on the client's clock against the proxy's stamps of the same chunks.
    raw_ttft, raw_ttfa = (chunks[0][0] - posted) / 1e9, (chunks[closed + 1][0] - posted) / 1e9
    assert as_raw(st.ttft_s, raw_ttft) and as_raw(st.ttfa_s, raw_ttfa), (st.ttft_s, raw_ttft, st.ttfa_s, raw_ttfa)
    assert st.ttfa_s > st.ttft_s and 0 < st.thinking_share < 1
    # Recorded and replayed: the same phases.
    replayed = Session.from_events(read_recording(recorder.path).events).timer.runs[fin.run_id].total
    assert (replayed.phase_tokens, replayed.ttfa_s) == (st.phase_tokens, st.ttfa_s)


def test_attach_no_tui_json_prints_one_object_a_run_with_its_phases(thinking_server):
    cmd = [sys.executable, "-m", "tui_app", "attach", thinking_server.url, "--no-tui", "-o", "json", "--runs", "2", "--prompt", PROMPT]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runs = [json.loads(line) for line in out.stdout.splitlines()]  # stdout is JSON alone
    assert len(runs) == 2 and "llama.cpp server at" in out.stderr
    for run in runs:
        assert run["thinking_tokens"] > 0 and run["answer_tokens"] > 0 and run["tool_tokens"] == 0
        assert run["thinking_tokens"] + run["answer_tokens"] == run["new_tokens"]
        assert run["ttfa_s"] > run["ttft_s"] > 0 and run["text"].startswith("<think>")


def test_the_serving_bench_gives_ttfa_and_the_thinking_share_and_holds_an_slo_on_ttfa(thinking_server, tmp_path):
    """Each request's TTFA is the timer's own (checked against the raw stream above); the cell's
    percentiles are those of its requests, and `--slo ttfa=` counts the requests that met it."""
    cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", thinking_server.url, "--lengths", "16:80", "--concurrency", "1"]
    cmd += ["--repeats", "1", "--warmup", "0", "--slo", "ttfa=1.2s", "-o", "json", "--out", str(tmp_path / "b")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "TTFA p50/p95/p99" in out.stdout and "thinking share" in out.stdout
    data = json.loads((tmp_path / "b.json").read_text())
    row, reqs = data["results"][0], data["requests"][0]
    assert all(r["ttfa_s"] > r["ttft_s"] and r["thinking_tokens"] > 0 for r in reqs)
    assert row["ttfa_p50_s"] == pytest.approx(sorted(r["ttfa_s"] for r in reqs)[len(reqs) // 2])
    assert row["thinking_share"] == pytest.approx(sum(r["thinking_tokens"] for r in reqs) / sum(r["tokens"] for r in reqs))
    assert row["good"] == sum(r["ttfa_s"] <= 1.2 for r in reqs)


@pytest.mark.serial  # two clocks of the same moments compared: a loaded machine delays one reader
@pytest.mark.parametrize("shape", ["ollama", "deepseek", "harmony"])
async def test_each_reasoning_stream_no_server_here_sends_is_split_and_timed_as_its_raw_bytes(shape):
    """Ollama's `reasoning`, DeepSeek's `reasoning_content` and gpt-oss's Harmony channels in
    `content`, each from a stand-in sending its engine's documented chunks (tests/helpers/sse_standin.py),
    end to end through the client and a proxy that stamps each read."""
    standin = SseStandIn(gap_ms=20, reasoning=shape)
    session = Session()
    try:
        fin, posted, tapped = await tapped_run(int(standin.url.rsplit(":", 1)[1]), session, RunRequest(prompt=PROMPT, max_new_tokens=64))
    finally:
        standin.close()
    sent = reasoning_chunks(shape)
    assert [text for _, _, text, _ in tapped] == [next(v for k, v in delta.items() if k != "role" and v) for _, delta in sent]
    thought = sum(1 for phase, _ in sent if phase == "thinking")  # a chunk a token: no running count
    st = session.timer.runs[fin.run_id].total
    assert st.phase_tokens == {"thinking": thought, "answer": len(sent) - thought}
    assert fin.text == "".join(text for _, _, text, _ in tapped)
    raw_ttft, raw_ttfa = (tapped[0][0] - posted) / 1e9, (tapped[thought][0] - posted) / 1e9
    assert as_raw(st.ttft_s, raw_ttft) and as_raw(st.ttfa_s, raw_ttfa), (st.ttft_s, raw_ttft, st.ttfa_s, raw_ttfa)
    assert fin.server.get("server_reasoning_tokens") == (thought if shape == "deepseek" else None)


def test_each_engine_takes_the_thinking_levers_its_api_documents():
    """A budget where the engine takes one on a request (vLLM), no thinking where its chat API passes
    the template's switch on (vLLM, SGLang); the rest refused with the reason (test_attach.py)."""
    took = {e.name: [v for v in THINK_BUDGETS if isinstance(lever_answer("think", v, Levers(), e), LeverChanged)] for e in (VLLM, SGLANG, LLAMACPP)}
    assert took == {"vLLM": [0, 64, 256, 1024, -1], "SGLang": [0, -1], "llama.cpp": [0]}
