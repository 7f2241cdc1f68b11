"""`tokentop bench --endpoint`'s options and their checks (the plan, before any server is
touched), and the run: each cell's rounds on the servers in turn, the progress, the tables at the end."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, replace

from monitors.events import EngineError
from monitors.servers import MetricsWindow
from tui_app.attach.tokenizer import Prompts
from tui_app.commands.bench import SweepOptions, add_sweep, outputs_writable, sweep_lengths
from tui_app.commands.serving import workloads as wl
from tui_app.commands.serving.cells import Measuring, Plan, measure_round, report, warm_up
from tui_app.commands.serving.tables import SLO_KEYS, Cell
from tui_app.core.options import EXIT_USAGE, UsageError, bounded

PARSER = {
    "prog": "tokentop bench",
    "usage": "tokentop bench --endpoint URL [--endpoint URL ...] [options]",
    "description": "A serving benchmark of running servers: prompt length × output length × load (concurrent clients, "
    "or Poisson arrivals with --rate), or a ShareGPT dataset's or a Mooncake trace's requests, each request through the attach "
    "client; TTFT, ITL, TPOT, e2e, throughput and goodput with their intervals over --repeats rounds, with the servers' own "
    "figures from their /metrics; --sweep finds the highest rate that meets --slo.",
}


@dataclass(kw_only=True)
class Options(SweepOptions):
    endpoint: list[str]
    model: str | None
    label: list[str]
    concurrency: str
    rate: float | None
    duration: float | None
    slo: str
    prompts: str | None
    shared_prefix: int
    api_key_env: str | None
    insecure: bool
    seed_arrivals: int
    otlp: str | None  # HOST:PORT of the OTLP receiver for the servers' spans
    requests: int | None  # a round's requests (a dataset's: conversations); None: the load's own default
    burstiness: float  # --rate's gamma shape: 1 Poisson, inf evenly spaced
    dataset: list[str] | None  # [FORMAT, FILE]
    multi_turn: bool
    trace: str | None
    trace_speed: float
    trace_block: int | None  # tokens per hash id; None: Mooncake's 512, the sample's 16
    output_len: int | None  # every request's output length instead of the file's
    too_long: str  # "refuse" or "skip": a request over the server's context
    sweep: str | None  # LO:HI[:STEP] requests/s
    goodput_level: float  # percent of requests that must meet --slo for a step to pass
    live: bool


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("servers and load")
    g.add_argument("--endpoint", action="append", default=[], metavar="URL", help="a running server to benchmark (repeatable)")
    g.add_argument("--model", default=None, help="the served model to ask (default: the first of /v1/models)")
    g.add_argument("--label", action="append", default=[], help="a name per --endpoint (default host:port)")
    g.add_argument("--concurrency", default="1", help="closed loop: comma-separated numbers of concurrent clients (default 1)")
    g.add_argument("--rate", type=bounded(float, 0, lo_open=True), default=None, help="open loop: Poisson arrivals at this many requests/s instead")
    g.add_argument("--duration", type=bounded(float, 0, lo_open=True), default=None, help="open loop: seconds of arrivals per round (default: 10 requests)")
    g.add_argument(
        "--slo",
        default="",
        help="e.g. ttft=500ms,itl=50ms (also ttfa: a reasoning model's first answer token, tpot, e2e; ms or s): goodput counts requests meeting all",
    )
    g.add_argument("--prompts", default=None, metavar="FILE", help="prompts to cycle through: JSONL with a 'prompt' field, or one per line")
    g.add_argument("--shared-prefix", type=bounded(int, 0), default=0, metavar="N", help="every request starts with the same N tokens (prefix-cache studies)")
    g.add_argument("--api-key-env", default=None, metavar="VAR", help="the environment variable holding the API key")
    g.add_argument("--insecure", action="store_true", help="accept a self-signed TLS certificate")
    g.add_argument("--seed-arrivals", type=bounded(int, 0, 2**63 - 1), default=0, help="seed of the open loop's arrival times")
    from tui_app.attach.otlp import add_otlp_arg
    from tui_app.commands.serving.sweep import add_sweep_args

    add_otlp_arg(g)  # bench: the server's queue, prefill and decode per request, and the client's overhead beside them
    wl.add_workload_args(g)
    add_sweep_args(g)
    g.add_argument("--live", action="store_true", help="show the attach TUI while the load runs (the servers, the streams, the progress)")
    add_sweep(p)


def main(opts: Options) -> int:
    try:
        lengths = sweep_lengths(opts)
    except ValueError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not outputs_writable(opts):
        return EXIT_USAGE
    if opts.live:
        from tui_app.commands.serving.live import run_live

        check(opts)  # a usage error is one line here, not a TUI that closes at once
        return run_live(opts, lengths, bench_process, lambda: asyncio.run(run_endpoint_bench(opts, lengths)))
    return asyncio.run(run_endpoint_bench(opts, lengths))


def bench_process(job, commands, events, log_path: str | None) -> None:
    """The --live bench's own process (spawned by tui_app.process.EngineProcess): the bench, its
    events to the TUI (live.py)."""
    from tui_app.commands.serving.live import serve_bench

    serve_bench(job, commands, events, log_path, run_endpoint_bench)


def parse_slo(spec: str) -> dict[str, float]:
    """'ttft=500ms,itl=50ms' → {'ttft': 0.5, 'itl': 0.05} (seconds)."""
    out: dict[str, float] = {}
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        key, _, value = part.partition("=")
        key = key.strip().lower()
        if key not in SLO_KEYS or not value:
            raise UsageError(f"--slo {part!r}: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}, e.g. ttft=500ms")
        v = value.strip().lower()
        scale = 1e-3 if v.endswith("ms") else 1.0
        try:
            seconds = float(v.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            raise UsageError(f"--slo {part!r}: {value!r} is not a time (500ms, 0.5s)") from None
        if seconds <= 0:
            raise UsageError(f"--slo {part!r}: must be more than 0")
        out[key] = seconds
    return out


def read_prompts(path: str) -> list[str]:
    from tui_app.prompts import read_prompt_file

    try:
        text = read_prompt_file(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                out.append(str(json.loads(line)["prompt"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise UsageError(f"--prompts {path}: line {n} is JSON without a 'prompt' field") from None
        else:
            out.append(line)
    if not out:
        raise UsageError(f"--prompts {path}: no prompts in it")
    return out


def check(args: Options) -> Plan:
    """Every option's sense and every file's entries, before connecting: UsageError, one line."""
    from tui_app.commands.serving.sweep import parse_sweep

    slo = parse_slo(args.slo)
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {args.concurrency!r}: expected numbers like 1,4,16") from None
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise UsageError("--concurrency: each must be at least 1")
    if args.label and len(args.label) != len(args.endpoint):
        raise UsageError("--label: give one per --endpoint, or none")
    if args.dataset and args.trace:
        raise UsageError("--dataset and --trace: give one workload")
    if args.multi_turn and not args.dataset:
        raise UsageError("--multi-turn is for --dataset's conversations")
    rates = None
    if args.sweep is not None:
        rates = parse_sweep(args.sweep)
        if not slo:
            raise UsageError("--sweep finds the highest rate that meets an SLO: give --slo, e.g. --slo ttft=500ms")
        if args.rate is not None or args.trace:
            raise UsageError("--sweep sets the rate itself; leave out --rate and --trace (a trace's pace is --trace-speed)")
    plan = Plan(slo, concurrencies, read_prompts(args.prompts) if args.prompts else None, rates)
    if args.dataset:
        kind, path = args.dataset
        if kind.lower() != "sharegpt":
            raise UsageError(f"--dataset {kind!r}: the format known is sharegpt (--dataset sharegpt FILE)")
        plan.conversations, unusable = wl.read_sharegpt(path, args.multi_turn)
        if unusable:
            plan.notes.append(f"--dataset {path}: {unusable} conversation(s) without a human turn answered, left out")
    if args.trace:
        plan.trace = wl.read_trace(args.trace, wl.trace_block(args))
    return plan


def attach_configs(args: Options) -> list:
    from tui_app.attach import otlp
    from tui_app.attach.client import AttachConfig

    try:
        otlp_address = otlp.checked_address(args)
    except (otlp.ReceiverError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return [
        AttachConfig(
            url=u,
            model=args.model,
            label=args.label[i] if args.label else "",
            api_key_env=args.api_key_env,
            insecure=args.insecure,
            chat=False,
            temperature=0.0,
            metrics_hz=4.0,
            otlp=otlp_address,
            max_connections=None,
        )
        for i, u in enumerate(args.endpoint)
    ]


async def workload_of(args: Options, plan: Plan, clients: list) -> wl.Workload | None:
    """The dataset's or trace's requests, counted by the first server's tokenizer, checked against
    the smallest context among the servers."""
    if plan.conversations is None and plan.trace is None:
        return None
    prompts = Prompts(clients[0], None, 0)

    async def count(text: str) -> int:
        ids = await prompts._tokens(text)
        return len(ids) if ids is not None else max(len(text) // 4, 1)

    if plan.conversations is not None:
        items = await wl.dataset_items(plan.conversations, count, args.output_len, args.requests)
        w = wl.Workload("sharegpt", items)
    else:
        items = [replace(it, new_tokens=args.output_len or it.new_tokens) for it in plan.trace or []]
        w = wl.Workload("trace", items, speed=args.trace_speed, block=wl.trace_block(args))
    contexts = [c.n_ctx for c in clients if c.n_ctx]
    what = f"--dataset {args.dataset[1]}" if args.dataset else f"--trace {args.trace}"
    w.items, w.skipped = wl.too_long(w.items, min(contexts) if contexts else None, args.too_long, what)
    if w.skipped:
        plan.notes.append(f"{what}: {len(w.skipped)} request(s) over the server's context of {min(contexts)} tokens left out: " + "; ".join(w.skipped[:5]))
    if not w.items:
        raise UsageError(f"{what}: no request fits the server's context")
    return w


def planned_requests(args: Options, cp: wl.CellPlan) -> int:
    """A round's requests as planned (the progress bar's and goodput's denominator)."""
    w = cp.workload
    if w is not None:
        return len(w.items) if w.timed or not args.requests else sum(1 for it in w.items if it.conversation < args.requests)
    size = wl.round_size(args, cp)
    return size if size is not None else max(int((args.duration or 0) * (cp.rate or 0)), 1)


async def run_endpoint_bench(args: Options, lengths: list[tuple[int, int]], emit=None, out=None, progress_sink=None) -> int:
    """The bench on the servers; `emit` also gets every event (the --live TUI), the tables go to
    `out` (default stdout), `progress_sink` gets the progress as it changes."""
    from tui_app.attach.errors import AttachError
    from tui_app.attach.loop import Servers
    from tui_app.commands.serving.progress import Progress
    from tui_app.core.session import Session

    plan = check(args)
    out = out or sys.stdout
    session = Session()
    said: set[str] = set()

    def feed(ev) -> None:
        session.feed(ev)
        if emit is not None:
            emit(ev)
        elif isinstance(ev, EngineError) and ev.message not in said and len(said) < 16:
            # Why a request failed, each reason once: the tables count failures, they cannot say why.
            said.add(ev.message)
            print(f"tokentop: {ev.message}", file=sys.stderr, flush=True)

    servers = Servers(attach_configs(args), feed)
    try:
        try:
            await servers.connect()
        except AttachError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return EXIT_USAGE
        workload = await workload_of(args, plan, servers.clients)
        for note in plan.notes:
            print(f"tokentop: {note}", file=sys.stderr)
        if plan.rates is not None:
            from tui_app.commands.serving.sweep_run import run_sweep

            return await run_sweep(args, plan, lengths, workload, servers, session, out, progress_sink)
        cps = wl.plans(args, lengths, plan.concurrencies, workload)
        warm_of = {id(cp): args.warmup * (cp.concurrency if cp.rate is None and not (workload and workload.timed) else 1) for cp in cps}
        total = sum((warm_of[id(cp)] + args.repeats * planned_requests(args, cp)) * len(servers.clients) for cp in cps)
        progress = Progress(total, len(cps), sink=progress_sink)
        cells: list[Cell] = []
        prompts = {id(c): Prompts(c, plan.texts, args.shared_prefix) for c in servers.clients}  # each server's tokenizer, its texts never repeated
        fresh = 0  # rounds so far: a dataset's or trace's texts are made anew for each
        for cp in cps:
            runs = []
            for client in servers.clients:
                cell = Cell(client.levers.server, cp.load, cp.p_len, cp.new, slo=plan.slo, key=cp.key, planned=args.repeats * planned_requests(args, cp))
                runs.append((client, Measuring(cell, MetricsWindow(client.engine, window_s=1e9))))
            session.xray.limit = max(session.xray.limit, warm_of[id(cp)] + args.repeats * planned_requests(args, cp))  # a cell's every request, for its X-ray
            progress.start_cell(f"{cp.load} {cp.key}", sum(run.cell.planned for _, run in runs))
            for k in range(args.repeats):
                for client, run in runs:  # round k of each server back to back
                    servers.active = servers.clients.index(client)
                    warm, items = await wl.round_items(args, cp, prompts[id(client)], k, warm_of[id(cp)] if k == 0 else 0, fresh)
                    await warm_up(client, session, warm)
                    await measure_round(client, session, run, items, cp.concurrency, on_done=lambda sent, req: progress.request_done())
                fresh += 1
            progress.end_cell()
            cells.extend(run.cell for _, run in runs)
        progress.close()
        return report(args, plan, servers, cells, out)
    finally:
        await servers.aclose()
