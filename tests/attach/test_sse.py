"""The chunk reader on canned streams, one per server family's shape (the real servers' streams go
through it in test_attach.py and the vLLM tier)."""

import json

from tui_app.attach.sse import ChunkReader, run_end


def chat(content=None, finish=None, **extra) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def read_all(lines: list[str]) -> tuple[ChunkReader, list[tuple[str, int]]]:
    reader = ChunkReader()
    steps = []
    for line in lines:
        got = reader.read(line)
        if reader.out.error or reader.out.done:
            break
        if got is not None:
            steps.append(got)
    else:
        reader.close()
    if reader.out.done:
        reader.close()
    return reader, steps


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
    assert reader.read(chat("a", timings={"predicted_n": 1})) == ("a", 1)
    assert reader.read(chat("!", timings={"predicted_n": 1})) is None
    reader.close()
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
