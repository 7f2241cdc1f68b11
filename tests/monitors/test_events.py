import dataclasses
import json

import pytest

from monitors import events as E
from monitors.codec import EVENT_TYPES, EventDecodeError, from_json, to_json
from monitors.events import Levers

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
    E.TorchMemory(device="mps", allocated=1, reserved=2, peak=1, limit=4),
    E.AllocatorHistory(path="/tmp/h.pickle", runs=3, left=0, first_run=4, seconds=0.5, error=""),
    E.Anatomy(
        run_id=2,
        steps=8,
        step_ms=80.0,
        parts={"mlp": 40.0, "framework": 5.0},
        gpu_ms={"mlp": 30.0},
        trace="/tmp/t.json",
        levers=E.Levers(),
        ops_ms=70.0,
        ops=400.0,
    ),
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
    E.Bandwidth(quant="off", weight_bytes=12_900_000, read_bytes=12_600_000, read_bps=20e9, source="a read of the fp weights in place", expert_bytes=24576),
    E.ExpertLoad(run_id=2, steps=5, counts=[[3, 0, 7, 0], [1, 4, 5, 0]], last_hits=3),
    E.RequestSent(
        run_id=2, segment=3, trace_id="0af7651916cd43dd8448eb211c80319c", request_id="tokentop-2.3-0af765191cd4", wall_ns=1_700_000_000_000_000_000, t_ns=8
    ),
    E.ServerTiming(
        run_id=2,
        segment=3,
        trace_id="0af7651916cd43dd8448eb211c80319c",
        source="otlp",
        phases={"queue": 0.25, "e2e": 0.8},
        sources={"queue": "gen_ai.latency.time_in_queue"},
        details={"span": "llm_request"},
        start_unix_ns=9,
    ),
    E.ServerTiming(
        run_id=2, segment=1, trace_id="ff" * 16, source="otlp", phases={}, sources={}, note="no server span: nothing reached http://127.0.0.1:4318/v1/traces"
    ),
    E.OtlpStatus(
        address="127.0.0.1:4318",
        bodies=3,
        spans=70,
        joined=2,
        others=68,
        rejected={"malformed": 1},
        others_summary={"latest": 68, "names": {"llm_request": 68}},
    ),
    E.EngineError(message="boom", fatal=True),
    E.FleetReady(
        url="http://127.0.0.1:9090",
        version="2.42.0",
        selector='{job="vllm"}',
        window_s=60.0,
        every_s=2.0,
        queries={"running": "sum by (job) (vllm:num_requests_running)"},
        watch=True,
    ),
    E.FleetSample(
        t_ns=8,
        ts=1795550000.5,
        rows=[
            {
                "job": "vllm",
                "instance": "10.0.0.1:8000",
                "engine": "0",
                "server": "",
                "family": "vLLM",
                "up": False,
                "since": 1795549990.0,
                "ttft": {"p50": 0.1},
            }
        ],
        fleet={"running": 3.0, "j_per_token": 0.42},
        notes=["10.0.0.1:8000 (vllm) down at 12:00:00: connection refused"],
        others=["dcgm"],
    ),
    E.FleetSample(t_ns=9, ts=1795550001.0, rows=[], fleet={"gen_tps": 12.5}, backfill=True),
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
    assert {type(e).__name__ for e in SAMPLES} == set(EVENT_TYPES)


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


def test_a_field_at_its_default_is_left_out_of_the_line_and_comes_back():
    """A plain step's line carries none of speculation's, the confidence's or a batch's fields (a
    third of its bytes); a batched step's does; both decode to the event they were."""
    plain = E.Step(
        run_id=1, step=2, kind="decode", token_ids=[7], text=" a", n_tokens=1, t_ns=5, dt_ns=3, forward_ns=2, kv_bytes=0, kv_alloc_bytes=0, seq_len=9
    )
    line = to_json(plain)
    assert not {"segment", "proposed", "confidence", "batch", "waiting", "batch_tokens"} & set(json.loads(line))
    assert '"kv_bytes":0' in line  # a field with no default is always written, at 0 too
    batched = E.Step(**{**vars(plain), "batch": [[0, 9, 2, 8], [1, 5, 1, 4]], "waiting": 1, "batch_tokens": 2})
    assert {"batch", "waiting", "batch_tokens"} <= set(json.loads(to_json(batched)))
    assert from_json(line) == plain and from_json(to_json(batched)) == batched
