"""Request X-ray: where one request spent its time, the client's account and the server's on one
time axis.

The clock rule. Every duration the server reports is the server's own (its span's attributes, its
response's timings), and no duration is ever taken between two hosts' clocks. Placement on the
client's axis is anchored at the client's send (t = 0): the server's phases are laid end to end
from there, in the order the server went through them. Whatever the client saw beyond the
server's account (the network both ways, the server's HTTP layer before its clock started, the
client's own reading of the stream) is the difference: overhead = client TTFT − server TTFT,
and the same for end-to-end time.

The server's account, best source first:
- an OTLP span (vLLM's `llm_request`): gen_ai.latency.time_in_queue, time_in_model_prefill,
  time_in_model_decode, time_to_first_token and e2e, with the token counts and the request id;
  "front" is what the span's TTFT holds beyond queue and prefill (the request's way from the HTTP
  layer to the scheduler, and the first token's way back), "tail" what its e2e holds beyond
  the rest, so the phases sum to its e2e;
- the response's own timings (llama.cpp: prompt_ms is the prefill, predicted_ms the decode,
  cache_n the prompt tokens taken from its cache; no queue figure: a wait for a free slot is
  outside its account);
- a usage block (vLLM, SGLang without spans): counts only, cached prompt tokens among them.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from monitors.events import OtlpStatus, RequestSent, ServerTiming, Step

# Phases of the waterfall, in the order a request goes through them. "client": the part of the
# client's end-to-end time outside the server's account.
PHASES = ("front", "queue", "prefill", "decode", "tail", "client")
PHASE_LABELS = {
    "front": "server front (HTTP → scheduler)",
    "queue": "queued",
    "prefill": "prefill",
    "decode": "decode",
    "tail": "server tail",
    "client": "outside the server's account (network, client)",
}
# A phase's colour everywhere it is drawn (the TUI's waterfall, the report's figures): Okabe–Ito.
PHASE_COLOURS = {
    "front": "#999999",
    "queue": "#e69f00",
    "prefill": "#0072b2",
    "decode": "#009e73",
    "tail": "#777777",
    "client": "#cc79a7",
    "unaccounted": "#444444",
}
XRAY_RUNS = 64  # runs whose requests are kept (a bench has many one-stream runs, a TUI run up to 32 streams)
# Chunk arrivals kept over all those runs: 64 runs of 32 streams held 65,000 marks and their
# requests, 0.1 MiB a run, and an attached soak read the climb to its bound as a leak.
XRAY_MARKS = 1 << 14
MAX_MARKS = 4096  # chunk arrivals kept per request: more than a waterfall's columns can tell apart
OTHERS = 256  # the latest spans of other clients' traces, for their summary

LATENCY = "gen_ai.latency."
SPAN_PHASES = {
    "queue": LATENCY + "time_in_queue",
    "prefill": LATENCY + "time_in_model_prefill",
    "decode": LATENCY + "time_in_model_decode",
    "ttft": LATENCY + "time_to_first_token",
    "e2e": LATENCY + "e2e",
    "inference": LATENCY + "time_in_model_inference",
}
SPAN_DETAILS = {
    "prompt_tokens": "gen_ai.usage.prompt_tokens",
    "completion_tokens": "gen_ai.usage.completion_tokens",
    "server_request_id": "gen_ai.request.id",
}


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def from_span(name: str, attributes: dict, start_unix_ns: int, end_unix_ns: int) -> tuple[dict, dict, dict]:
    """(phases, sources, details) of a server span: its gen_ai.latency.* attributes; e2e from the
    span's own start and end where it has no attribute for it."""
    phases: dict = {}
    sources: dict = {}
    for key, attr in SPAN_PHASES.items():
        v = _num(attributes.get(attr))
        if v is not None:
            phases[key], sources[key] = v, attr
    if "e2e" not in phases and end_unix_ns > start_unix_ns:
        phases["e2e"], sources["e2e"] = (end_unix_ns - start_unix_ns) / 1e9, f"span {name}: end − start"
    q, p, d, ttft, e2e = (phases.get(k) for k in ("queue", "prefill", "decode", "ttft", "e2e"))
    if ttft is not None and q is not None and p is not None:
        phases["front"], sources["front"] = ttft - q - p, "time_to_first_token − time_in_queue − time_in_model_prefill"
    if e2e is not None and None not in (q, p, d) and "front" in phases:
        phases["tail"], sources["tail"] = e2e - phases["front"] - q - p - d, "e2e − front − queue − prefill − decode"
    details = {k: attributes[a] for k, a in SPAN_DETAILS.items() if attributes.get(a) is not None}
    details["span"] = name
    return phases, sources, details


def from_timings(timings: dict) -> tuple[dict, dict, dict]:
    """(phases, sources, details) of llama.cpp's per-response `timings` (milliseconds)."""
    phases: dict = {}
    sources: dict = {}
    for key, field_ in (("prefill", "prompt_ms"), ("decode", "predicted_ms")):
        v = _num(timings.get(field_))
        if v is not None:
            phases[key], sources[key] = v / 1000, f"timings.{field_}"
    if "prefill" in phases:
        # llama.cpp samples the first token at the end of the prompt's pass.
        phases["ttft"], sources["ttft"] = phases["prefill"], "timings.prompt_ms"
        if "decode" in phases:
            phases["e2e"], sources["e2e"] = phases["prefill"] + phases["decode"], "timings.prompt_ms + predicted_ms"
    details = {}
    for key, field_ in (
        ("prompt_tokens", "prompt_n"),
        ("cached_tokens", "cache_n"),
        ("completion_tokens", "predicted_n"),
        ("draft_tokens", "draft_n"),
        ("draft_accepted", "draft_n_accepted"),
    ):
        if timings.get(field_) is not None:
            details[key] = timings[field_]
    return phases, sources, details


def from_usage(usage: dict) -> dict:
    """The counts of an OpenAI usage block, cached prompt tokens among them where the server says."""
    details = {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if usage.get(k) is not None}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        details["cached_tokens"] = cached
    return details


def lay_out(phases: dict, client_e2e_s: float | None) -> list[tuple[str, float, float]]:
    """(phase, start s, end s) on the client's axis, anchored at the send: the server's phases end
    to end, then what the client saw beyond them ("client"; "unaccounted" where the server gave
    no phases at all)."""
    out: list[tuple[str, float, float]] = []
    t = 0.0
    for name in PHASES[:-1]:
        d = phases.get(name)
        if d is not None and d > 0:
            out.append((name, t, t + d))
            t += d
    if client_e2e_s is not None and client_e2e_s > t:
        out.append(("client" if out else "unaccounted", t, client_e2e_s))
    return out


@dataclass
class RequestXray:
    """One stream of a run: the client's marks and the server's account of it."""

    run_id: int
    segment: int
    trace_id: str = ""
    request_id: str = ""
    sent_ns: int = 0
    sent_wall_ns: int = 0
    marks: list = field(default_factory=list)  # chunk arrivals (t_ns), the first MAX_MARKS
    chunks: int = 0
    tokens: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    server: ServerTiming | None = None  # the best account so far (a span before the response's own)
    response: ServerTiming | None = None  # the response's own account, kept beside a span's for its counts
    note: str = ""  # why there is no server account

    def take(self, ev: ServerTiming) -> None:
        if not ev.phases and not ev.details:
            if self.server is None or self.server.source != "otlp":
                self.note = ev.note
            return
        if ev.source == "otlp":
            self.server, self.note = ev, ""
        else:
            self.response = ev
            if self.server is None or self.server.source != "otlp":
                self.server = ev
        if ev.source != "otlp" and ev.note:
            self.note = ev.note

    def _client_s(self, t_ns: int | None) -> float | None:
        return (t_ns - self.sent_ns) / 1e9 if t_ns is not None and self.sent_ns else None

    @property
    def client_ttft_s(self) -> float | None:
        return self._client_s(self.first_ns)

    @property
    def client_e2e_s(self) -> float | None:
        return self._client_s(self.last_ns)

    def phase(self, name: str) -> float | None:
        return self.server.phases.get(name) if self.server is not None else None

    @property
    def overhead_ttft_s(self) -> float | None:
        """Client TTFT − server TTFT: the request's way to the server and the first token's way back."""
        c, s = self.client_ttft_s, self.phase("ttft")
        return c - s if c is not None and s is not None else None

    @property
    def overhead_e2e_s(self) -> float | None:
        c, s = self.client_e2e_s, self.phase("e2e")
        return c - s if c is not None and s is not None else None

    @property
    def details(self) -> dict:
        """The server's counts: the span's, over the response's own."""
        out: dict = {}
        for acc in (self.response, self.server):
            if acc is not None:
                out.update(acc.details)
        return out

    def bars(self) -> list[tuple[str, float, float]]:
        return lay_out(self.server.phases if self.server is not None else {}, self.client_e2e_s)

    def mark_offsets(self) -> list[float]:
        """Each chunk's arrival, seconds after the send."""
        return [(t - self.sent_ns) / 1e9 for t in self.marks]

    def flat(self) -> dict:
        """The figures as one JSON-ready dict (bench's per-request JSON, export)."""
        s = self.server
        d: dict = {
            "trace_id": self.trace_id,
            "request_id": self.request_id,
            "server_source": s.source if s is not None else None,
            "server_note": self.note or None,
            "client_ttft_s": self.client_ttft_s,
            "client_e2e_s": self.client_e2e_s,
            "overhead_ttft_s": self.overhead_ttft_s,
            "overhead_e2e_s": self.overhead_e2e_s,
        }
        for name in ("front", "queue", "prefill", "decode", "tail", "ttft", "e2e"):
            d[f"server_{name}_s"] = self.phase(name)
        d["server_sources"] = dict(s.sources) if s is not None else {}
        d.update({f"server_{k}": v for k, v in self.details.items()})
        return d


class XrayBook:
    """Every request of the last XRAY_RUNS runs that carried a trace id (fewer where their chunks
    pass XRAY_MARKS), folded from the events;
    spans of other clients counted and the latest OTHERS kept for their summary."""

    def __init__(self, runs: int = XRAY_RUNS, marks: int = XRAY_MARKS):
        self.limit = runs
        self.marks_limit = marks
        self.marks = 0  # chunk arrivals held over every kept request
        self.runs: OrderedDict[int, dict[int, RequestXray]] = OrderedDict()
        self.others: deque[ServerTiming] = deque(maxlen=OTHERS)
        self.status: OtlpStatus | None = None
        self.version = 0  # changes with every event taken, so a view redraws only then

    def feed(self, ev) -> None:
        if isinstance(ev, Step):
            run = self.runs.get(ev.run_id)
            if run is None:
                return
            req = run.get(ev.segment)
            if req is None:
                return
            if len(req.marks) < MAX_MARKS:
                req.marks.append(ev.t_ns)
                self.marks += 1
            req.chunks += 1
            req.tokens += ev.n_tokens
            if req.first_ns is None:
                req.first_ns = ev.t_ns
            req.last_ns = ev.t_ns
        elif isinstance(ev, RequestSent):
            run = self.runs.setdefault(ev.run_id, {})
            run[ev.segment] = RequestXray(ev.run_id, ev.segment, ev.trace_id, ev.request_id, ev.t_ns, ev.wall_ns)
            # The run being sent stays, whatever its streams hold.
            while len(self.runs) > 1 and (len(self.runs) > self.limit or self.marks > self.marks_limit):
                _, gone = self.runs.popitem(last=False)
                self.marks -= sum(len(r.marks) for r in gone.values())
        elif isinstance(ev, ServerTiming):
            if ev.run_id is None:
                self.others.append(ev)
            else:
                req = self.runs.get(ev.run_id, {}).get(ev.segment)
                if req is None:
                    return
                req.take(ev)
        elif isinstance(ev, OtlpStatus):
            self.status = ev
        else:
            return
        self.version += 1

    def requests(self, run_id: int) -> list[RequestXray]:
        return [r for _, r in sorted(self.runs.get(run_id, {}).items())]

    def get(self, run_id: int, segment: int = 0) -> RequestXray | None:
        return self.runs.get(run_id, {}).get(segment)

    def run_ids(self) -> list[int]:
        return list(self.runs)
