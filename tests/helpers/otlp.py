"""OTLP export bodies for the receiver's tests and benchmark, built with opentelemetry-proto's own
messages, and the attributes vLLM puts on its `llm_request` span."""

from __future__ import annotations

VLLM_ATTRS = {
    "gen_ai.latency.time_in_queue": 0.25,
    "gen_ai.latency.time_in_model_prefill": 0.04,
    "gen_ai.latency.time_in_model_decode": 0.5,
    "gen_ai.latency.time_to_first_token": 0.31,
    "gen_ai.latency.e2e": 0.812,
    "gen_ai.usage.prompt_tokens": 12,
    "gen_ai.usage.completion_tokens": 16,
    "gen_ai.request.id": "cmpl-tokentop-1.0-abc",
}


def protobuf_body(spans: list[tuple[str, str, dict]], parent: str = "") -> bytes:
    """An ExportTraceServiceRequest of (trace id, name, attributes) spans, by opentelemetry-proto."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def value(v):
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        return AnyValue(string_value=str(v))

    out = []
    for k, (trace_id, name, attrs) in enumerate(spans):
        out.append(
            Span(
                trace_id=bytes.fromhex(trace_id),
                span_id=(k + 1).to_bytes(8, "big"),
                parent_span_id=bytes.fromhex(parent) if parent else b"",
                name=name,
                start_time_unix_nano=1_700_000_000_000_000_000,
                end_time_unix_nano=1_700_000_000_812_000_000,
                attributes=[KeyValue(key=a, value=value(v)) for a, v in attrs.items()],
            )
        )
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=out)])]).SerializeToString()
