"""The event stream: plain dataclasses that the engine emits and every reader consumes.

One stream feeds the UI, the recorder, the headless benchmark and replay, so there is no
second code path that computes numbers differently. Every field is named where an event is made
(kw_only): a Step has twenty-three, and a value in the wrong place would still be an int. Events serialize to one JSON object
per line and back without loss (only ints, floats, strings, bools, None, lists, dicts: codec.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

QUANT_LEVELS = ("off", "int8", "int4")
SPEC_MODES = ("off", "lookup", "draft")
BATCH_SIZES = (1, 2, 4, 8)
NO_THINKING = -1  # the think span closed at once: its close the first token (on a server, the template's switch)
# a reasoning model's thinking tokens at most, the close included (0: off, no budget), then no thinking at all
THINK_BUDGETS = (0, 64, 256, 1024, NO_THINKING)
STEP_KINDS = ("prefill", "decode", "reprefill", "verify")


def think_label(think: int) -> str:
    """A thinking budget as the labels name it: `think≤64`, `no-think`."""
    return "no-think" if think == NO_THINKING else f"think≤{think}"


def next_lever_value(lever: str, current, batch_sizes: tuple[int, ...] | None = None):
    """What a lever's key switches it to from `current`: on/off, or the next of its values (the
    first after the last). `batch_sizes`: on a server, the numbers of streams it may be asked for."""
    if lever in ("cache", "compile"):
        return not current
    return cycled({"quant": QUANT_LEVELS, "spec": SPEC_MODES, "batch": batch_sizes or BATCH_SIZES, "think": THINK_BUDGETS}[lever], current)


def cycled(values, current):
    """The value after `current` among `values`: the first after the last, or where `current` is not one."""
    values = list(values)
    return values[(values.index(current) + 1) % len(values)] if current in values else values[0]


def now_ns() -> int:
    # perf_counter is CLOCK_MONOTONIC on Linux: system-wide, so engine and UI timestamps compare.
    return time.perf_counter_ns()


@dataclass(frozen=True)
class Levers:
    cache: bool = True
    compile: bool = False
    quant: str = "off"
    spec: str = "off"
    batch: int = 1  # on a server: concurrent streams
    think: int = 0  # the thinking budget (THINK_BUDGETS; 0: off; NO_THINKING)
    server: str = ""  # attached to a server: its label (the in-process levers are the server's own)

    def label(self) -> str:
        if self.server:
            return f"{self.server} c{self.batch}" + (f" {think_label(self.think)}" if self.think else "")
        parts = ["cache" if self.cache else "no-cache"]
        if self.compile:
            parts.append("compile")
        if self.quant != "off":
            parts.append(self.quant)
        if self.spec != "off":
            parts.append(f"spec:{self.spec}")
        if self.batch != 1:
            parts.append(f"b{self.batch}")
        if self.think:
            parts.append(think_label(self.think))
        return " ".join(parts)

    def is_plain(self) -> bool:
        """The settings whose greedy output is the reference every other run is compared with:
        full-precision weights through the plainest path (no compile, speculation or batching),
        so that a bug in any of those shows as a difference instead of becoming the reference."""
        return self == Levers(cache=self.cache)


@dataclass(kw_only=True)
class EngineReady:
    model: str
    source: str
    device: str
    dtype: str
    n_params: int
    weight_bytes: int
    n_layers: int
    kv_heads: int
    head_dim: int
    kv_bytes_per_elem: int
    context_len: int
    load_s: float
    threads: int
    quant_impl: dict = field(default_factory=dict)
    perplexity: float | None = None
    # Attached to a server: {"engine", "url", "metrics_url", "metrics" (why none, or ""), "kv_note", "pid"}.
    server: dict | None = None
    t_ns: int = field(default_factory=now_ns)
    placement: dict | None = None  # --device-map: weight bytes per device ("cuda:0", "cpu", "disk")
    demo_leak: str = ""  # --demo-leak: what the engine keeps a run on purpose, said on screen while on
    experts: str = ""  # an MoE's experts: how many, how many a token reads ("8 experts, 2 a token")
    thinks: bool = False  # the model's tokenizer has a think span's markers: the thinking budget lever applies
    # An MoE whose routing is counted (tui_app/engine/routing.py): {"layers", "experts", "top_k",
    # "shared" (layers with a shared expert, read by every token)}; routing_note: an MoE's that is not, why.
    routing: dict | None = None
    routing_note: str = ""
    backend: str = ""  # the device's: "CUDA 12.8", "ROCm 6.4" (AMD GPUs run as cuda); "" on the CPU


@dataclass(kw_only=True)
class Phase:
    """A preparation phase (load, compile, quantize) with its own duration, never mixed into
    steady-state numbers. cost_of: the lever setting it is a one-time cost of ("quant:int8",
    "compile:int4", "recompile:off"), for the ledger; empty for the others. graph_breaks: a
    compile's, by dynamo's own count."""

    name: str
    detail: str
    done: bool
    seconds: float = 0.0
    cost_of: str = ""
    graph_breaks: int = 0
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class RunStarted:
    run_id: int
    levers: Levers
    prompt_tokens: int
    max_new_tokens: int
    prompt_text: str
    preset: str = "custom"
    cache_note: str = ""  # a watched script's run without a KV cache: why, in the words the screen shows
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class Step:
    """One step's tokens as its source emitted them.

    t_ns: when the step was emitted (the engine: its tokens detokenized and measured, just before
    the emit; a server client: the chunk's arrival). dt_ns: the interval since the previous
    emission of the run (RunStarted's for the first step), less the phases (pause, compile,
    quantize) between: every cost of a token, the loop's own included, as a reader sees it.
    forward_ns: the model's forward and the pick of the token: on a CPU by the host's perf counter,
    on CUDA the GPU's time between two CUDA events around them (read at the step's one host
    read: no sync of its own). compute_ns: the step's own work, from its start after
    the command poll to its tokens in hand (forward, sampling, the host read); dt_ns - compute_ns
    is what the loop spends between steps (detokenizing, KV measurement, the emit, the poll).
    Sources that cannot see inside a step (a server) leave forward_ns and compute_ns 0.
    drafted_chars: how much of `text`, from its start, the accepted drafted tokens made.
    rejected_text: the text the rejected drafts would have made after them, not part of `text`.
    confidence: the model's own probability (softmax at temperature 1) of each of `token_ids`, as
    the engine picked them; empty unless asked for (the o key's confidence colouring), since it
    costs a softmax over the vocabulary a step. token_chars: with it, how much of `text` each of
    `token_ids` made, in order, so each token's text carries its own probability.
    batch: distinct prompts batched with the run's own (the engine's continuous batching), each
    row as [its number in order of arrival (0: the run's own), prompt tokens, new tokens, max new
    tokens]; then kv_alloc_bytes is the padded cache and kv_bytes the rows' own tokens' share of
    it. waiting: arrivals queued for a slot. batch_tokens: every row's new tokens in this step.
    phase: the phase of a reasoning model's generation the step's tokens belong to."""

    run_id: int
    step: int
    kind: str
    token_ids: list
    text: str
    n_tokens: int
    t_ns: int
    dt_ns: int
    forward_ns: int
    kv_bytes: int
    kv_alloc_bytes: int
    seq_len: int
    segment: int = 0
    proposed: int = 0
    accepted: int = 0
    compute_ns: int = 0
    drafted_chars: int = 0
    rejected_text: str = ""
    confidence: list = field(default_factory=list)
    token_chars: list = field(default_factory=list)
    batch: list = field(default_factory=list)
    waiting: int = 0
    batch_tokens: int = 0
    phase: str = "answer"  # thinking, answer or tool call (monitors/phases.py); recordings from before phases are all answer
    experts_hit: int | None = None  # an MoE's: distinct (layer, routed expert) pairs the step's forwards read


@dataclass(kw_only=True)
class LeverChanged:
    run_id: int | None
    lever: str
    value: object
    levers: Levers
    segment: int = 0
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class LeverRefused:
    lever: str
    value: object
    reason: str
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class TorchMemory:
    device: str
    allocated: int
    reserved: int
    peak: int
    trouble: dict = field(default_factory=dict)  # the allocator's counters that mean trouble, where not 0 (torch_memory.TROUBLE)
    limit: int | None = None  # Metal's recommended working set on MPS (recommended_max_memory); None elsewhere
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class AllocatorHistory:
    """The CUDA allocator's history over a window of `runs` runs from `first_run`: recording while
    `left` > 0, then dumped to `path` (memory_viz's pickle) in `seconds`, or not, for `error`."""

    path: str
    runs: int
    left: int
    first_run: int
    seconds: float = 0.0
    error: str = ""
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class Anatomy:
    """Where a window of `steps` decode steps of run `run_id` spent their time, from torch.profiler
    (tui_app/engine/anatomy.py): the mean step (ms, the profiler's clock: perf counter time on the
    host) and each part's mean ms a step (the model's parts by module, sampling, the host read,
    framework: the rest), on CUDA each part's GPU kernel ms; `trace`: the window's Chrome trace."""

    run_id: int
    steps: int
    step_ms: float
    parts: dict
    gpu_ms: dict
    trace: str
    levers: Levers
    ops_ms: float = 0.0  # of the step, inside torch's ops: the rest is Python, in the modules or between them
    ops: float = 0.0  # torch's ops a step (the outermost of each nest)
    read_s: float = 0.0  # reading the profiler's events and writing the trace, after the window
    trace_error: str = ""  # why the trace was not written (then `trace` is empty)
    gpu_busy_ms: float = 0.0  # on CUDA, a step: the GPU running a kernel (the union of the kernels' spans)
    gpu_idle_ms: float = 0.0  # on CUDA, a step: the GPU idle between its first kernel and its last, waiting on launches
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class RunFinished:
    run_id: int
    n_tokens: int
    stop_reason: str
    text: str
    peak_rss: int | None  # None: a server that is not on this host and exports no RSS of its own
    baseline_rss: int | None
    torch_peak: int | None
    gpu_baseline: int | None
    perplexity: float | None
    first_diff: int | None  # first token that differs from plain greedy on the same prompt
    diff_note: str  # the output against plain greedy: identical, differs at token N, reference, …
    t_ns: int = field(default_factory=now_ns)
    prompt_tokens: int | None = None  # a server's own count, known only when its stream ends
    server: dict | None = None  # a server run: its own timings and counts (attach/client.py)
    # On CUDA, the device baseline beside gpu_baseline (torch allocated): torch reserved and
    # NVML's count of the engine process, which holds the CUDA context and graph pools too.
    gpu_reserved: int | None = None
    gpu_proc_mem: int | None = None
    # An MoE's routing over the run (EngineReady.routing): for each MoE layer in order, each routed
    # expert's count of the positions forwarded to it; a layer's counts sum to positions × top_k.
    expert_counts: list | None = None


@dataclass(kw_only=True)
class ExpertLoad:
    """An MoE's routing since the previous ExpertLoad of the run (or its start), sent at most every
    quarter second and at the run's end (tui_app/engine/routing.py): for each MoE layer in order,
    each routed expert's count of the positions sent to it, over `steps` steps; `last_hits`: the
    distinct (layer, expert) pairs the last of them read."""

    run_id: int
    steps: int
    counts: list
    last_hits: int | None = None  # None where no step's read brings it (a watched script's run, counted whole)
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class Sampled:
    """One sampler reading, recorded so that replay draws the same memory and utilization charts."""

    t_ns: int
    engine_rss: int | None = None
    engine_cpu: float | None = None
    app_rss: int | None = None
    app_cpu: float | None = None
    sys_cpu: float | None = None
    sys_mem_used: int | None = None
    sys_mem_total: int | None = None
    swap_used: int | None = None
    gpu_sm: float | None = None
    gpu_mem_used: int | None = None
    gpu_mem_total: int | None = None
    gpu_proc_mem: int | None = None
    gpu_power_w: float | None = None
    gpu_reason: str = ""
    gpu_mem_util: float | None = None  # NVML's % of time device memory was read or written, mean over GPUs
    gpu_sm_clock_mhz: int | None = None  # the highest SM clock among the GPUs
    gpus: list | None = None  # every GPU of the machine, each monitors.gpu.GpuSample as a dict
    gpu_dram_pct: float | None = None  # NVML GPM's % of DRAM bandwidth used, mean over the engine's GPUs (Hopper and later)
    gpu_slowed: str = ""  # NVML's clock-event reasons holding the engine's GPUs' clocks down now
    cpu_energy_mj: int | None = None  # the CPU packages' RAPL energy since the sampler's first reading (monitors/rapl.py)
    cpu_energy_reason: str = ""  # why there is none: no powercap (a VM), a counter only root reads


@dataclass(kw_only=True)
class Bandwidth:
    """The weights a decode step reads and this machine's rate of reading those bytes (the engine's
    measurement: tui_app/engine/bandwidth.py), taken when the weights change and on request.
    weight_bytes: each weight tensor a step reads, once; read_bytes: what the measurement read
    (the weights in place, less runs of them under 1 MiB); read_bps: its best rate, bytes/s.
    expert_bytes: an MoE's, one routed expert of one layer; weight_bytes counts top_k of them a
    layer (one token's), and a step's distinct experts (Step.experts_hit) say what it really read."""

    quant: str
    weight_bytes: int
    read_bytes: int
    read_bps: float
    source: str
    expert_bytes: int = 0
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class ServerSample:
    """One scrape of an attached server's /metrics, as figures (monitors.servers): `values` by
    figure name (quantile figures as {p50, p95, p99, mean, n}), `sources` the metric each came from."""

    t_ns: int
    values: dict
    sources: dict
    error: str = ""  # why there is no scrape (no /metrics, unreachable), said once per change
    server: str = ""  # which attached server (its label), when several are compared


@dataclass(kw_only=True)
class RequestSent:
    """One stream's request leaving the attach client. It carries a W3C `traceparent` with a fresh
    trace id and an `x-request-id`: the keys that join it to the server's own account of it
    (ServerTiming). t_ns is the client's send on the events' clock, the same instant as its run's
    RunStarted (TTFT runs from it); wall_ns is time.time_ns() then, to set beside a server's wall
    clock only where both clocks are one (the same host)."""

    run_id: int
    segment: int
    trace_id: str  # 32 hex digits
    request_id: str
    wall_ns: int
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class FleetReady:
    """A fleet read through Prometheus (monitors.fleet): where, its version, which replicas (the
    label selector), the window its rates and quantiles are taken over, how often it is asked,
    and the PromQL of each figure (a row figure's query covers every engine family at once)."""

    url: str
    version: str
    selector: str
    window_s: float
    every_s: float
    queries: dict
    watch: bool = False  # tokentop sends no request of its own
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class ServerTiming:
    """The server's own account of one request (monitors/xray.py folds it): `phases` in seconds by
    name (front, queue, prefill, decode, tail, ttft, e2e), `sources` the attribute or field each
    came from, `details` its counts (prompt, completion and cached tokens, the server's request id).
    source: where the account came from: "otlp" (a span), "timings" (llama.cpp's response),
    "usage" (an OpenAI usage block). run_id None: a span of a trace no request of ours carried.
    note: why there is no account ("no server span: …"); a later one replaces it. start_unix_ns:
    the server's wall clock at the request's arrival, as it sent it. t_ns: its arrival here."""

    run_id: int | None
    segment: int
    trace_id: str
    source: str
    phases: dict
    sources: dict
    details: dict = field(default_factory=dict)
    start_unix_ns: int | None = None
    note: str = ""
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class OtlpStatus:
    """The OTLP receiver's counts since it started, sent when they change (at most once a second):
    bodies and spans received, spans joined to our requests, spans of other clients' traces (and a
    summary of the latest of those), bodies rejected by reason (malformed, oversize, media type)."""

    address: str
    bodies: int = 0
    spans: int = 0
    joined: int = 0
    others: int = 0
    rejected: dict = field(default_factory=dict)
    others_summary: dict = field(default_factory=dict)
    error: str = ""
    t_ns: int = field(default_factory=now_ns)


@dataclass(kw_only=True)
class FleetSample:
    """One refresh of the fleet: `ts` Prometheus' evaluation time (unix seconds), a row per
    replica (monitors.fleet: figures, up, since, marks), the fleet's own figures (quantiles over
    every replica's summed buckets), and what changed (`notes`: a replica down or back, a query
    refused, once). `backfill`: the fleet's past, from query_range, before tokentop attached.
    `error`: why there is no refresh (Prometheus unreachable, refused), said once per change."""

    t_ns: int
    ts: float
    rows: list
    fleet: dict
    notes: list = field(default_factory=list)
    error: str = ""
    backfill: bool = False
    others: list = field(default_factory=list)  # jobs the selector matched that export no engine's metrics


@dataclass(kw_only=True)
class EngineError:
    message: str
    fatal: bool = False
    t_ns: int = field(default_factory=now_ns)
