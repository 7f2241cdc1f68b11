"""The chunk reader on canned streams, one per server family's shape (the real servers' streams go
through it in test_attach.py and the vLLM tier)."""

import json

from tui_app.attach.sse import ChunkReader, run_end


def chat(content=None, finish=None, **extra) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def read_all(lines: list[str]) -> tuple[ChunkReader, list[tuple[str, int]]]:
    """As the client reads: each line's pieces, then what waits at the end (not text without a token after an error)."""
    reader = ChunkReader()
    pieces = []
    for line in lines:
        pieces += reader.read(line)
        if reader.out.error or reader.out.done:
            break
    pieces += reader.close(keep_pending=not reader.out.error)
    return reader, [(p.text, p.n) for p in pieces]


def test_llama_cpp_running_count_makes_a_chunk_of_several_tokens_one_step():
    timings = lambda n: {"prompt_n": 7, "cache_n": 3, "predicted_n": n}  # noqa: E731
    reader, steps = read_all(
        [
            chat(None, timings=timings(0)),  # the role chunk: no text, no token
            chat("The", timings=timings(1)),
            chat(" cat sat", timings=timings(3)),  # a speculative step: two tokens at once
            chat(" ", timings=timings(3)),  # text the server has not counted yet waits for the next token
            chat("down", finish="length", timings=timings(4)),
            "[DONE]",
            chat("never read", timings=timings(9)),
        ]
    )
    out = reader.out
    assert steps == [("The", 1), (" cat sat", 2), (" down", 1)]
    assert out.text == "The cat sat down" and out.counted == 4 and out.from_server and out.done
    assert out.context == 7 + 3 + 4 and out.finish == "length" and out.chunks == 4
    assert out.server_total() == 4


def test_vllm_continuous_usage_counts_and_the_final_usage_chunk():
    usage = lambda n: {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}  # noqa: E731
    reader, steps = read_all(
        [
            chat("", usage=usage(0)),
            chat("Hello", usage=usage(1)),
            chat(" world", usage=usage(3)),
            chat("", finish="stop", usage=usage(3)),
            json.dumps({"choices": [], "usage": {**usage(3), "prompt_tokens_details": {"cached_tokens": 8}}}),
            "[DONE]",
        ]
    )
    out = reader.out
    assert steps == [("Hello", 1), (" world", 2)]
    assert out.finish == "stop" and out.context == 15 and out.server_total() == 3
    assert out.usage["prompt_tokens_details"]["cached_tokens"] == 8


def test_without_a_running_count_each_chunk_with_text_is_one_token():
    completions = [json.dumps({"choices": [{"text": t, "index": 0, "finish_reason": None}]}) for t in ("a", "b", "")]
    reader, steps = read_all([chat(None), chat("x"), *completions, "[DONE]"])
    out = reader.out
    assert steps == [("x", 1), ("a", 1), ("b", 1)]
    assert not out.from_server and out.counted == 3 and out.chunks == 3 and out.server_total() is None and out.context == 0


def test_malformed_lines_are_counted_and_skipped_and_blank_ones_ignored():
    reader, steps = read_all(["", "  ", "{not json", "[1, 2]", '"text"', chat("ok"), "[DONE]"])
    assert steps == [("ok", 1)] and reader.out.malformed == 3 and reader.out.text == "ok"


def test_an_error_mid_stream_ends_it_with_the_servers_message():
    error = json.dumps({"error": {"message": "KV cache is full", "type": "server_error"}})
    reader, steps = read_all([chat("a"), chat(" "), error, chat("b")])
    assert steps == [("a", 1), (" ", 1)] and reader.out.error == "the server sent an error mid-stream: KV cache is full"


def test_text_still_waiting_for_a_token_ends_the_output_when_the_stream_closes():
    reader = ChunkReader()
    assert [(p.text, p.n) for p in reader.read(chat("a", timings={"predicted_n": 1}))] == [("a", 1)]
    assert reader.read(chat("!", timings={"predicted_n": 1})) == []
    assert reader.close() == []
    assert reader.out.text == "a!" and reader.out.counted == 1


def test_the_runs_end_takes_the_servers_final_counts_and_the_first_streams_reason():
    lead, other = ChunkReader(), ChunkReader()
    for n, text in enumerate(("a", "b", "c"), 1):
        lead.read(chat(text, timings={"prompt_n": 5, "cache_n": 2, "predicted_n": n, "prompt_ms": 12.5}))
    lead.read(chat("", finish="length", timings={"prompt_n": 5, "cache_n": 2, "predicted_n": 3, "prompt_ms": 12.5}))
    other.read(chat("x"))
    other.read(chat("y"))
    reason, n_tokens, prompt_tokens, details = run_end([lead.out, other.out], stopped=False)
    assert reason == "max tokens" and n_tokens == 3 + 2 and prompt_tokens == 7  # the second stream counted by its chunks
    assert details["tokens_from"] == "server running count" and details["server_tokens"] == 3 and details["cached_tokens"] == 2
    assert details["prompt_ms"] == 12.5
    assert run_end([lead.out], stopped=True)[0] == "stopped" and run_end([other.out], stopped=False)[0] == "stream ended"
    other.out.error = "cannot reach h:1"
    assert run_end([other.out], stopped=False)[0] == "error"


def delta(**fields) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": fields, "finish_reason": None}]})


def phases_of(lines: list[str]) -> tuple[ChunkReader, list[tuple[str, int, str]]]:
    reader = ChunkReader()
    pieces = [p for line in lines for p in reader.read(line)]
    pieces += reader.close()
    return reader, [(p.text, p.n, p.phase) for p in pieces]


def test_each_servers_reasoning_field_is_thinking_and_its_content_the_answer():
    # vLLM and Ollama's /v1: `reasoning`; llama.cpp, SGLang and DeepSeek's API: `reasoning_content`.
    for field in ("reasoning", "reasoning_content", "thinking"):
        _, got = phases_of([delta(role="assistant"), delta(**{field: "Hm,"}), delta(**{field: " sky."}), delta(content="\n\nBlue"), "[DONE]"])
        assert got == [("Hm,", 1, "thinking"), (" sky.", 1, "thinking"), ("\n\nBlue", 1, "answer")], field


def test_a_chunk_with_reasoning_and_content_at_the_switch_keeps_both_in_order():
    usage = lambda n: {"prompt_tokens": 9, "completion_tokens": n}  # noqa: E731
    lines = [
        json.dumps({"choices": [{"index": 0, "delta": {"reasoning": "so"}}], "usage": usage(1)}),
        json.dumps({"choices": [{"index": 0, "delta": {"reasoning": " yes", "content": "Yes"}}], "usage": usage(3)}),
        json.dumps({"choices": [], "usage": {**usage(3), "completion_tokens_details": {"reasoning_tokens": 2}}}),
    ]
    reader, got = phases_of(lines)
    assert got == [("so", 1, "thinking"), (" yes", 1, "thinking"), ("Yes", 1, "answer")]
    assert reader.out.text == "so yesYes"
    assert run_end([reader.out], stopped=False)[3]["server_reasoning_tokens"] == 2  # the server's own count, kept beside ours


def test_a_tool_calls_name_and_arguments_are_the_tool_call_phase():
    call = lambda fn: delta(tool_calls=[{"index": 0, "function": fn}])  # noqa: E731
    _, got = phases_of([delta(content="Let me look."), call({"name": "get_weather", "arguments": ""}), call({"arguments": '{"city": "Oslo"}'})])
    assert got == [("Let me look.", 1, "answer"), ("get_weather ", 1, "tool call"), ('{"city": "Oslo"}', 1, "tool call")]


def test_think_tags_left_in_content_are_read_and_a_stray_close_is_said():
    reader, got = phases_of([delta(content=t) for t in ("<", "think", ">", "hm", "</think>", "Hi")])
    assert [p for _, _, p in got] == ["thinking"] * 5 + ["answer"]
    assert "thinking" not in run_end([reader.out], stopped=False)[3]
    stray, got = phases_of([delta(content=t) for t in ("Yes", "</think>")])
    assert {p for _, _, p in got} == {"answer"} and run_end([stray.out], stopped=False)[3]["thinking"].startswith("1 closing marker")
