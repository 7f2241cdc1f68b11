import dataclasses

import pytest

from monitors import events as E
from monitors.events import EventDecodeError, Levers, from_json, to_json

SAMPLES = [
    E.EngineReady("m", "gguf", "cpu", "float32", 1, 2, 3, 4, 5, 4, 8192, 1.5, 1, {"int8": "x"}, 13.2),
    E.Phase("compile", "batch 1", True, 47.5),
    E.RunStarted(1, Levers(cache=False, quant="int8", batch=4), 42, 64, 'héllo ✓ \n "q"', "short"),
    E.Step(1, 2, "verify", [1, 2, 3], "a\u00e9b", 3, 123456789, 1000, 900, 4096, 8192, 7, 1, 5, 2),
    E.LeverChanged(1, "spec", "lookup", Levers(spec="lookup"), 2),
    E.LeverChanged(None, "cache", False, Levers(cache=False)),
    E.LeverRefused("quant", "int4", "needs bf16"),
    E.TorchMemory("cuda:0", 1, 2, 3),
    E.RunFinished(1, 10, "eos", "text", 1, 2, None, None, 13.25, 4, "differs"),
    E.Sampled(5, engine_rss=1, engine_cpu=99.5, gpu_reason="n/a: no GPU"),
    E.ServerSample(6, {"kv_usage": 0.25, "ttft": {"p50": 0.1, "p95": 0.2, "p99": 0.3, "mean": 0.12, "n": 4.0}}, {"kv_usage": "vllm:kv_cache_usage_perc"}),
    E.ServerSample(7, {}, {}, error="no Prometheus metrics at http://h:1/metrics: start llama-server with --metrics"),
    E.RunStarted(2, Levers(batch=4, server="vllm-a"), 0, 16, "p", "short"),
    E.RunFinished(2, 64, "max tokens", "t", None, None, None, None, None, None, "identical", prompt_tokens=42, server={"prompt_ms": 12.5}),
    E.EngineReady("m", "http://h:1", "vLLM", "server", 0, 0, 0, 0, 0, 0, 2048, 0.1, 0, server={"engine": "vLLM", "pid": None}),
    E.Bandwidth("int4", 95004160, 94666752, 37.1e9, "a read of the int4 weights in place"),
    E.RequestSent(2, 3, "0af7651916cd43dd8448eb211c80319c", "tokentop-2.3-0af765191cd4", 1_700_000_000_000_000_000, t_ns=8),
    E.ServerTiming(
        2, 3, "0af7651916cd43dd8448eb211c80319c", "otlp", {"queue": 0.25, "e2e": 0.8}, {"queue": "gen_ai.latency.time_in_queue"}, {"span": "llm_request"}, 9
    ),
    E.ServerTiming(2, 1, "ff" * 16, "otlp", {}, {}, note="no server span: nothing reached http://127.0.0.1:4318/v1/traces"),
    E.OtlpStatus("127.0.0.1:4318", 3, 70, 2, 68, {"malformed": 1}, {"latest": 68, "names": {"llm_request": 68}}),
    E.EngineError("boom", True),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_event_roundtrips_losslessly(event):
    line = to_json(event)
    assert "\n" not in line
    back = from_json(line)
    assert type(back) is type(event)
    assert back == event
    assert dataclasses.asdict(back) == dataclasses.asdict(event)


def test_every_event_type_is_covered_by_the_roundtrip_test():
    assert {type(e).__name__ for e in SAMPLES} == set(E.EVENT_TYPES)


@pytest.mark.parametrize(
    "line,needle",
    [
        ("{not json", "invalid JSON"),
        ("[1,2]", "not a JSON object"),
        ('{"type": "Nope"}', "not a tokentop event"),
        ('{"type": "Phase", "name": "x"}', "Phase"),
        ('{"type": "Phase", "name": "x", "detail": "", "done": true, "bogus": 1}', "bogus"),
    ],
)
def test_bad_lines_raise_a_clear_error(line, needle):
    with pytest.raises(EventDecodeError, match=needle):
        from_json(line)


def test_levers_label_and_plain():
    assert Levers().label() == "cache"
    assert Levers(cache=False, compile=True, quant="int8", spec="draft", batch=2).label() == "no-cache compile int8 spec:draft b2"
    assert Levers().is_plain() and Levers(cache=False).is_plain()
    assert not any(Levers(**kw).is_plain() for kw in ({"spec": "lookup"}, {"quant": "int4"}, {"compile": True}, {"batch": 2}))
