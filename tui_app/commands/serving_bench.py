"""`tokentop bench --endpoint URL [--endpoint URL2]`: a serving benchmark of running servers.

Cells: prompt length × output length × load, where load is a number of concurrent clients (closed
loop: each sends its next request when the last one ends) or, with --rate, Poisson arrivals at R
requests/s (open loop: requests start on schedule whatever the server's state, as real traffic
does). Every request goes through the attach client, so TTFT and ITL have the attach definitions
(ITL per token, a multi-token chunk spread over its tokens); TPOT is (e2e − TTFT) ÷ (tokens − 1)
per request, as `vllm bench serve` computes it. The server's own figures come from its /metrics
over the cell's window. Goodput: requests per second that met every SLO given with --slo.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass

from monitors.events import RunFinished
from monitors.servers import MetricsWindow
from tui_app.attach.tokenizer import Prompts
from tui_app.commands.bench import SweepOptions, add_sweep, outputs_writable, sweep_lengths
from tui_app.commands.serving_tables import SLO_KEYS, Cell, Request, markdown, write_outputs, xray_markdown
from tui_app.core import fmt
from tui_app.core.options import EXIT_USAGE, UsageError, bounded

PARSER = {
    "prog": "tokentop bench",
    "usage": "tokentop bench --endpoint URL [--endpoint URL ...] [options]",
    "description": "A serving benchmark of running servers: prompt length × output length × load (concurrent clients, "
    "or Poisson arrivals with --rate), each request through the attach client; TTFT, ITL, TPOT, e2e, throughput and goodput, "
    "with the servers' own figures from their /metrics.",
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


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("servers and load")
    g.add_argument("--endpoint", action="append", default=[], metavar="URL", help="a running server to benchmark (repeatable)")
    g.add_argument("--model", default=None, help="the served model to ask (default: the first of /v1/models)")
    g.add_argument("--label", action="append", default=[], help="a name per --endpoint (default host:port)")
    g.add_argument("--concurrency", default="1", help="closed loop: comma-separated numbers of concurrent clients (default 1)")
    g.add_argument("--rate", type=bounded(float, 0, lo_open=True), default=None, help="open loop: Poisson arrivals at this many requests/s instead")
    g.add_argument("--duration", type=bounded(float, 0, lo_open=True), default=None, help="open loop: seconds of arrivals (default: --repeats × 10 requests)")
    g.add_argument("--slo", default="", help="e.g. ttft=500ms,itl=50ms (also tpot, e2e; ms or s): goodput counts requests meeting all")
    g.add_argument("--prompts", default=None, metavar="FILE", help="prompts to cycle through: JSONL with a 'prompt' field, or one per line")
    g.add_argument("--shared-prefix", type=bounded(int, 0), default=0, metavar="N", help="every request starts with the same N tokens (prefix-cache studies)")
    g.add_argument("--api-key-env", default=None, metavar="VAR", help="the environment variable holding the API key")
    g.add_argument("--insecure", action="store_true", help="accept a self-signed TLS certificate")
    g.add_argument("--seed-arrivals", type=bounded(int, 0, 2**63 - 1), default=0, help="seed of the open loop's arrival times")
    from tui_app.attach.otlp import add_otlp_arg

    add_otlp_arg(g)  # bench: the server's queue, prefill and decode per request, and the client's overhead beside them
    add_sweep(p)


def main(opts: Options) -> int:
    try:
        lengths = sweep_lengths(opts)
    except ValueError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not outputs_writable(opts):
        return EXIT_USAGE
    return asyncio.run(run_endpoint_bench(opts, lengths))


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


def poisson_arrivals(rate: float, seed: int, count: int | None = None, duration: float | None = None) -> list[float]:
    """Send times (s from the start) of a Poisson process: exponential gaps of mean 1/rate."""
    rng = random.Random(seed)
    times: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if (count is not None and len(times) >= count) or (duration is not None and t > duration):
            return times
        times.append(t)


async def measure_cell(
    client, session, prompts: list[str], new: int, load: str, concurrency: int, rate: float | None, arrivals: list[float], warmup: int, slo: dict
) -> Cell:
    from tui_app.requests import RunRequest

    cell = Cell(client.levers.server, load, 0, new, slo=slo)
    reqs = [RunRequest(prompt=p, max_new_tokens=new, ignore_eos=True) for p in prompts]
    for req in reqs[:warmup]:
        await client.run(req)
    reqs = reqs[warmup:]
    window = MetricsWindow(client.engine, window_s=1e9)
    peaks: dict[str, float] = {}

    async def watch() -> None:
        while True:
            samples, _ = await client._scrape()
            if samples is not None:
                window.add(samples)
                values, _ = window.figures()
                for k in ("kv_usage", "waiting", "running"):
                    if isinstance(values.get(k), (int, float)):
                        peaks[k] = max(peaks.get(k, 0.0), values[k])
            await asyncio.sleep(0.25)

    watcher = asyncio.create_task(watch())
    sent: dict[int, float] = {}
    t0 = time.perf_counter()
    results: list[RunFinished | None] = []

    async def one(req) -> None:
        results.append(await client.run(req))

    if rate is None:
        queue = list(reqs)

        async def worker() -> None:
            while queue:
                await one(queue.pop(0))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    else:
        tasks = []
        for at, req in zip(arrivals, reqs, strict=False):
            delay = at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(req)))
        await asyncio.gather(*tasks)
    cell.wall_s = time.perf_counter() - t0
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    samples, _ = await client._scrape()
    if samples is not None:
        window.add(samples)
    values, _ = window.figures()
    cell.server_figures = {f"{k}_peak": v for k, v in peaks.items()}
    for k in ("prefix_hit", "spec_accept"):
        if isinstance(values.get(k), float):
            cell.server_figures[k] = values[k]
    if isinstance(values.get("preemptions"), float) and len(window.scrapes) > 1:
        cell.server_figures["preemptions"] = values["preemptions"] * (window.scrapes[-1].t - window.scrapes[0].t)
    for fin in results:
        if fin is None:
            continue
        rec = session.timer.runs[fin.run_id]
        st = rec.total
        sent[fin.run_id] = rec.started.t_ns
        cell.requests.append(
            Request(
                fin.run_id,
                0.0,
                fin.stop_reason in ("eos", "max tokens"),
                fin.prompt_tokens,
                fin.n_tokens,
                st.ttft_s,
                list(st.itl_s),
                (rec.last_t_ns - rec.started.t_ns) / 1e9,
            )
        )
    if sent:
        first = min(sent.values())
        for r in cell.requests:
            r.sent_s = (sent[r.run_id] - first) / 1e9
    await _accounted(client, session, cell.requests)
    cell.requests.sort(key=lambda r: r.sent_s)
    prompt = [r.prompt_tokens for r in cell.requests if r.prompt_tokens is not None]
    cell.prompt_tokens = round(sum(prompt) / len(prompt)) if prompt else 0
    return cell


async def _accounted(client, session, requests: list[Request]) -> None:
    """Each request's X-ray in its row, once the server's spans are in (they come batched, after
    their streams): waits until every request has its span or its "no server span", at most the grace."""
    from tui_app.attach.joiner import settled

    await settled([x for r in requests if (x := session.xray.get(r.run_id)) is not None], client.tracing.joiner)
    for r in requests:
        x = session.xray.get(r.run_id)
        if x is not None:
            r.xray = fmt.strict_json(x.flat())


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


async def run_endpoint_bench(args: Options, lengths: list[tuple[int, int]]) -> int:
    from tui_app.attach.client import AttachConfig
    from tui_app.attach.errors import AttachError
    from tui_app.attach.loop import Servers
    from tui_app.core.session import Session

    slo = parse_slo(args.slo)
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {args.concurrency!r}: expected numbers like 1,4,16") from None
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise UsageError("--concurrency: each must be at least 1")
    if args.label and len(args.label) != len(args.endpoint):
        raise UsageError("--label: give one per --endpoint, or none")
    texts = read_prompts(args.prompts) if args.prompts else None
    from tui_app.attach import otlp

    try:
        otlp_address = otlp.checked_address(args)
    except (otlp.ReceiverError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    configs = [
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
        )
        for i, u in enumerate(args.endpoint)
    ]
    session = Session()
    servers = Servers(configs, session.feed)
    try:
        try:
            await servers.connect()
        except AttachError as exc:
            print(f"tokentop: {exc}", file=sys.stderr)
            return EXIT_USAGE
        loads = [(f"r{args.rate:g}/s", 1)] if args.rate is not None else [(f"c{c}", c) for c in concurrencies]
        n_cells = len(lengths) * len(loads) * len(servers.clients)
        cells: list[Cell] = []
        done = 0
        for p_len, new in lengths:
            for load, conc in loads:
                if args.rate is not None:
                    arrivals = poisson_arrivals(args.rate, args.seed_arrivals, count=None if args.duration else args.repeats * 10, duration=args.duration)
                    count = len(arrivals)
                else:
                    arrivals, count = [], args.repeats * conc
                warm = args.warmup * (conc if args.rate is None else 1)
                session.xray.limit = max(session.xray.limit, warm + count)  # a cell's every request, for its X-ray
                for client in servers.clients:  # the servers take turns on each cell
                    servers.active = servers.clients.index(client)
                    prompts = await Prompts(client, texts, args.shared_prefix).make(p_len, warm + count)
                    cell = await measure_cell(client, session, prompts, new, load, conc, args.rate, arrivals, warm, slo)
                    cells.append(cell)
                    done += 1
                    print(f"\r{done}/{n_cells} cells", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        names = ", ".join(f"{c.levers.server} ({c.engine.name} {c.model})" for c in servers.clients)
        print(f"{names}; {args.warmup} warm-up + {args.repeats} × load requests per cell" + (f"; SLO {args.slo}" if slo else "") + "\n")
        print(markdown(cells))
        if args.otlp is not None:
            print("\n" + xray_markdown(cells))
        env = {
            "servers": [{"label": c.levers.server, "engine": c.engine.name, "url": c.root, "model": c.model} for c in servers.clients],
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "settings": {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        }
        written = write_outputs(args.out, args.output, cells, env)
        return 0 if written and all(r.ok for c in cells for r in c.requests) else 1
    finally:
        await servers.aclose()
