"""A reasoning model's phases against real vLLM (its CPU build) with its own reasoning parser on
(`deepseek_r1`): the server splits the thinking into `delta.reasoning` itself, the path users meet
with DeepSeek-R1's and Qwen3's templates, which open the think span in the prompt. The model is
scripted (tests/helpers/tiny_models.py): whatever it is asked, its greedy output is a known think,
`</think>` and a known answer, so the split is known token by token without shaping tokentop's
request; the raw stream, read through a proxy that stamps each read, is the reference for the
clocks. The thinking budget goes the server's way (`thinking_token_budget`)."""

from __future__ import annotations

import itertools

import pytest

from monitors.events import EngineError, LeverChanged, Step
from tests.helpers.proxy import as_raw, tapped_run
from tests.helpers.tiny_models import distinct_words, save_scripted_thinker, thinker_tokenizer
from tests.helpers.vllm import Spec, ahead, served
from tui_app.attach.client import AttachConfig, ServerClient
from tui_app.core.session import Session
from tui_app.requests import RunRequest

pytestmark = pytest.mark.vllm

ANSWER = " Rayleigh scattering makes it blue"


def thinking_bounds(chunks) -> tuple[int, int]:
    """The thinking's tokens as the raw stream shows them (its words, a token each), and that many
    plus the tokens without text of their own that came in an event bringing thinking. vLLM merges
    the deltas its API server fell behind on (`RequestOutputCollector.put`): on a loaded machine
    the closing marker's token once came in the thinking's last chunk (2026-12-02, a fresh clone:
    64 where 63), and no reader without the server's tokenizer can tell it from the thinking's."""
    tok, low, spare, before = thinker_tokenizer(), 0, 0, 0
    for running, event in itertools.groupby(chunks, key=lambda c: c[3]):
        assert running is not None, "vLLM streams its running count (continuous_usage_stats)"
        texts = list(event)
        words = sum(len(text.split()) for _, field, text, _ in texts if field == "reasoning")
        answer = sum(len(tok.encode(text, add_special_tokens=False)) for _, field, text, _ in texts if field == "content")
        low += words
        spare += running - before - words - answer if words else 0
        before = running
    return low, low + spare


@ahead("scripted_vllm")
def scripted_thinker_vllm(folder) -> Spec:
    script, closer = save_scripted_thinker(folder, distinct_words(80), ANSWER)
    return Spec(("--reasoning-parser", "deepseek_r1"), model=folder, extra=(script, script.index(closer)))


@pytest.fixture(scope="module")
def scripted_vllm(vllm_ahead):
    """(the server's port, the script's token ids, the index of `</think>` among them)."""
    url, (script, closer) = served(vllm_ahead, "scripted_vllm")
    return int(url.rsplit(":", 1)[1]), script, closer


async def test_the_split_is_the_servers_own_and_ttfa_that_of_the_raw_stream(scripted_vllm):
    port, script, closed = scripted_vllm
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    fin, posted, chunks = await tapped_run(port, session, RunRequest(prompt="Why is the sky blue?", max_new_tokens=128))
    assert "".join(text for _, field, text, _ in chunks if field == "reasoning") == distinct_words(80)
    assert "".join(text for _, field, text, _ in chunks if field == "content") == ANSWER
    assert fin.text == distinct_words(80) + ANSWER and fin.stop_reason == "eos"
    # The server streams no chunk for the closing marker: its token comes in the answer's first
    # chunk's count, so the answer counts it (and the end), as the server's stream places it.
    st = session.timer.runs[fin.run_id].total
    assert fin.n_tokens == fin.server["server_tokens"] == len(script)
    low, high = thinking_bounds(chunks)
    assert low == closed and low <= st.phase_tokens["thinking"] <= high, (st.phase_tokens, low, high)
    assert st.phase_tokens["thinking"] + st.phase_tokens["answer"] == len(script)
    steps = [e for e in events if isinstance(e, Step)]
    assert "".join(s.text for s in steps if s.phase == "thinking") == distinct_words(80)
    assert "".join(s.text for s in steps if s.phase == "answer") == ANSWER
    # vLLM's own count reads only a span opened in the output; this template opens it in the
    # prompt, so the server says 0, and tokentop keeps it as the server's beside its own.
    assert fin.server["server_reasoning_tokens"] == 0
    # TTFT and TTFA on the client's clock against the proxy's stamps of the same chunks (a TTFT here is 17-43 ms).
    first_answer = next(t for t, field, _, _ in chunks if field == "content")
    for client_s, raw_ns in ((st.ttft_s, chunks[0][0]), (st.ttfa_s, first_answer)):
        raw_s = (raw_ns - posted) / 1e9
        assert as_raw(client_s, raw_s), (client_s, raw_s)
    assert st.ttfa_s > st.ttft_s and st.thinking_share == pytest.approx(closed / len(script))


async def test_the_thinking_budget_goes_the_servers_way_and_the_server_closes_the_think(scripted_vllm):
    port, _, closed = scripted_vllm
    session = Session()
    fin, _, chunks = await tapped_run(port, session, RunRequest(prompt="Why is the sky blue?", max_new_tokens=128), levers={"think": 64})
    st = session.timer.runs[fin.run_id].total
    # vLLM counts the prompt's tokens after its opening `<think>` (a newline) in the budget, then
    # makes the next token the close; the script's model answers from there.
    low, high = thinking_bounds(chunks)
    assert low == 63 < closed and low <= st.phase_tokens["thinking"] <= high, (st.phase_tokens, low, high)
    assert st.phase_tokens["thinking"] + st.phase_tokens["answer"] == fin.n_tokens
    assert fin.text == "".join(" " + w for w in distinct_words(80).split()[:63]) + ANSWER
    assert session.timer.runs[fin.run_id].started.levers.label().endswith("think≤64")


async def test_no_thinking_goes_through_the_chat_template_and_the_model_answers_at_once(scripted_vllm):
    """The template's switch (`chat_template_kwargs`, as Qwen3's takes it): the scripted thinker's
    template closes the span in the prompt, and the model answers from `</think>`."""
    port, _, _ = scripted_vllm
    session = Session()
    client = ServerClient(AttachConfig(url=f"http://127.0.0.1:{port}"), session.feed)
    await client.connect()
    try:
        client.set_lever("think", -1)
        fin = await client.run(RunRequest(prompt="Why is the sky blue?", max_new_tokens=128))
    finally:
        await client.aclose()
    st = session.timer.runs[fin.run_id].total
    assert fin.text == ANSWER and "thinking" not in st.phase_tokens and fin.stop_reason == "eos"
    assert session.timer.runs[fin.run_id].started.levers.label().endswith("no-think")


async def test_a_server_without_a_reasoning_parser_refuses_the_budget_and_says_why(vllm_url):
    events: list = []
    session = Session()
    session.listeners.append(events.append)
    client = ServerClient(AttachConfig(url=vllm_url), session.feed)
    await client.connect()
    try:
        client.set_lever("think", 256)
        await client.run(RunRequest(prompt="Why is the sky blue?", max_new_tokens=8))
    finally:
        await client.aclose()
    assert any(isinstance(e, LeverChanged) and e.value == 256 for e in events)
    errors = [e.message for e in events if isinstance(e, EngineError)]
    assert len(errors) == 1 and "reasoning" in errors[0] and "\n" not in errors[0], errors
