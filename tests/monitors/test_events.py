import dataclasses

import pytest

from monitors import events as E
from monitors.events import EventDecodeError, Levers, from_json, to_json

SAMPLES = [
    E.EngineReady(
        model="m",
        source="gguf",
        device="cpu",
        dtype="float32",
        n_params=1,
        weight_bytes=2,
        n_layers=3,
        kv_heads=4,
        head_dim=5,
        kv_bytes_per_elem=4,
        context_len=8192,
        load_s=1.5,
        threads=1,
        quant_impl={"int8": "x"},
        perplexity=13.2,
    ),
    E.Phase(name="compile", detail="batch 1", done=True, seconds=47.5),
    E.RunStarted(
        run_id=1, levers=Levers(cache=False, quant="int8", batch=4), prompt_tokens=42, max_new_tokens=64, prompt_text='héllo ✓ \n "q"', preset="short"
    ),
    E.Step(
        run_id=1,
        step=2,
        kind="verify",
        token_ids=[1, 2, 3],
        text="a\u00e9b",
        n_tokens=3,
        t_ns=123456789,
        dt_ns=1000,
        forward_ns=900,
        kv_bytes=4096,
        kv_alloc_bytes=8192,
        seq_len=7,
        segment=1,
        proposed=5,
        accepted=2,
    ),
    E.LeverChanged(run_id=1, lever="spec", value="lookup", levers=Levers(spec="lookup"), segment=2),
    E.LeverChanged(run_id=None, lever="cache", value=False, levers=Levers(cache=False)),
    E.LeverRefused(lever="quant", value="int4", reason="needs bf16"),
    E.TorchMemory(device="cuda:0", allocated=1, reserved=2, peak=3),
    E.RunFinished(
        run_id=1,
        n_tokens=10,
        stop_reason="eos",
        text="text",
        peak_rss=1,
        baseline_rss=2,
        torch_peak=None,
        gpu_baseline=None,
        perplexity=13.25,
        first_diff=4,
        diff_note="differs",
    ),
    E.Sampled(t_ns=5, engine_rss=1, engine_cpu=99.5, gpu_reason="n/a: no GPU"),
    E.ServerSample(
        t_ns=6,
        values={"kv_usage": 0.25, "ttft": {"p50": 0.1, "p95": 0.2, "p99": 0.3, "mean": 0.12, "n": 4.0}},
        sources={"kv_usage": "vllm:kv_cache_usage_perc"},
    ),
    E.ServerSample(t_ns=7, values={}, sources={}, error="no Prometheus metrics at http://h:1/metrics: start llama-server with --metrics"),
    E.RunStarted(run_id=2, levers=Levers(batch=4, server="vllm-a"), prompt_tokens=0, max_new_tokens=16, prompt_text="p", preset="short"),
    E.RunFinished(
        run_id=2,
        n_tokens=64,
        stop_reason="max tokens",
        text="t",
        peak_rss=None,
        baseline_rss=None,
        torch_peak=None,
        gpu_baseline=None,
        perplexity=None,
        first_diff=None,
        diff_note="identical",
        prompt_tokens=42,
        server={"prompt_ms": 12.5},
    ),
    E.EngineReady(
        model="m",
        source="http://h:1",
        device="vLLM",
        dtype="server",
        n_params=0,
        weight_bytes=0,
        n_layers=0,
        kv_heads=0,
        head_dim=0,
        kv_bytes_per_elem=0,
        context_len=2048,
        load_s=0.1,
        threads=0,
        server={"engine": "vLLM", "pid": None},
    ),
    E.Bandwidth(quant="int4", weight_bytes=95004160, read_bytes=94666752, read_bps=37.1e9, source="a read of the int4 weights in place"),
    E.EngineError(message="boom", fatal=True),
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
