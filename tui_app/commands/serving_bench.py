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
import math
import random
import sys
import time
from dataclasses import dataclass, field

from monitors.events import RunFinished
from monitors.servers import MetricsWindow
from monitors.timing import Summary
from tui_app.attach.tokenizer import Prompts
from tui_app.commands.bench import SweepOptions, add_sweep, outputs_writable, sweep_lengths
from tui_app.core import fmt
from tui_app.core.options import EXIT_USAGE, UsageError, bounded, csv_text, write_file

SLO_KEYS = ("ttft", "itl", "tpot", "e2e")
XRAY_COLUMNS = ("server_queue", "server_prefill", "server_decode", "overhead_ttft", "overhead_e2e")
STATS = ("mean", "std", "p50", "p90", "p95", "p99")


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


@dataclass
class Request:
    """One request's numbers, as the attach client measured them."""

    run_id: int
    sent_s: float  # since the cell's start
    ok: bool
    prompt_tokens: int | None
    tokens: int
    ttft_s: float
    itl_s: list[float]
    e2e_s: float
    # Its X-ray (monitors/xray.py): trace and request ids, the server's phases with their sources, the overhead.
    xray: dict = field(default_factory=dict)

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1) if self.ok and self.tokens > 1 else math.nan

    @property
    def mean_itl_s(self) -> float:
        return sum(self.itl_s) / len(self.itl_s) if self.itl_s else math.nan

    def good(self, slo: dict[str, float]) -> bool:
        got = {"ttft": self.ttft_s, "itl": self.mean_itl_s, "tpot": self.tpot_s, "e2e": self.e2e_s}
        return self.ok and all(not math.isnan(got[k]) and got[k] <= v for k, v in slo.items())


@dataclass
class Cell:
    server: str
    load: str  # "c4" closed loop, "r2.5/s" open loop
    prompt_tokens: int
    new_tokens: int
    wall_s: float = 0.0
    requests: list[Request] = field(default_factory=list)
    server_figures: dict = field(default_factory=dict)
    slo: dict = field(default_factory=dict)

    def summary(self, name: str) -> Summary:
        ok = [r for r in self.requests if r.ok]
        values = {
            "ttft": [r.ttft_s for r in ok],
            "itl": [x for r in ok for x in r.itl_s],
            "tpot": [r.tpot_s for r in ok if not math.isnan(r.tpot_s)],
            "e2e": [r.e2e_s for r in ok],
        }[name]
        return Summary.of(values)

    def flat(self) -> dict:
        ok = [r for r in self.requests if r.ok]
        good = sum(r.good(self.slo) for r in self.requests) if self.slo else None
        d = {
            "server": self.server,
            "load": self.load,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "requests": len(self.requests),
            "failed": len(self.requests) - len(ok),
            "wall_s": self.wall_s,
            "server_prompt_tokens_mean": _mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
            "output_tok_s": sum(r.tokens for r in ok) / self.wall_s if self.wall_s else None,
            "requests_s": len(ok) / self.wall_s if self.wall_s else None,
            "slo": self.slo or None,
            "good": good,
            "goodput_requests_s": good / self.wall_s if good is not None and self.wall_s else None,
        }
        for name in SLO_KEYS:
            s = self.summary(name)
            for k in STATS:
                d[f"{name}_{k}_s"] = _none_if_nan(getattr(s, k))
        d.update({f"server_{k}": v for k, v in self.server_figures.items()})
        for name in XRAY_COLUMNS:
            s = self.xray_summary(name)
            for k in ("mean", "p50", "p99"):
                d[f"{name}_{k}_s"] = _none_if_nan(getattr(s, k))
        return d

    def xray_summary(self, name: str) -> Summary:
        """The server's account over the cell's requests (server_queue, server_prefill, …), or the
        client's time outside it (overhead_ttft, overhead_e2e)."""
        return Summary.of([r.xray[f"{name}_s"] for r in self.requests if r.ok and isinstance(r.xray.get(f"{name}_s"), (int, float))])


def _none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


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
    from tui_app.attach.otlp import settled

    await settled([x for r in requests if (x := session.xray.get(r.run_id)) is not None], client.joiner)
    for r in requests:
        x = session.xray.get(r.run_id)
        if x is not None:
            r.xray = fmt.strict_json(x.flat())


def xray_markdown(cells: list[Cell]) -> str:
    """Where each cell's requests spent their time by the server's account (its span), and the
    client's time outside it: mean / p50 / p99 in ms."""
    head = "| server | load | prompt→new | with a span | queue | prefill | decode | outside the server: TTFT | e2e |"
    lines = ["Server phases, mean / p50 / p99 ms (each figure's source is in the JSON):", "", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for c in cells:
        spans = sum(1 for r in c.requests if r.xray.get("server_source") == "otlp")

        def three(name: str, c=c) -> str:
            s = c.xray_summary(name)
            return " / ".join(fmt.ms(getattr(s, k), 1, unit=False) for k in ("mean", "p50", "p99"))

        lines.append(
            f"| {c.server} | {c.load} | {c.prompt_tokens}→{c.new_tokens} | {spans}/{len(c.requests)} | " + " | ".join(three(n) for n in XRAY_COLUMNS) + " |"
        )
    notes = {r.xray["server_note"] for c in cells for r in c.requests if r.xray.get("server_note")}
    return "\n".join(lines + [f"\n{n}" for n in sorted(notes)[:3]])


def markdown(cells: list[Cell]) -> str:
    head = (
        "| server | load | prompt→new | requests | TTFT p50/p95/p99 | ITL p50/p95/p99 | TPOT mean | e2e p50 | output tok/s | req/s "
        "| goodput req/s | KV peak | waiting peak | preempted | prefix hits |"
    )
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for c in cells:
        d = c.flat()
        ttft, itl = c.summary("ttft"), c.summary("itl")
        good = f"{d['goodput_requests_s']:.2f} ({d['good']}/{d['requests']})" if d["good"] is not None else "–"
        lines.append(
            f"| {c.server} | {c.load} | {c.prompt_tokens}→{c.new_tokens} | {d['requests']}"
            + (f" ({d['failed']} failed)" if d["failed"] else "")
            + f" | {fmt.ms(ttft.p50, 0)} / {fmt.ms(ttft.p95, 0)} / {fmt.ms(ttft.p99, 0)}"
            f" | {fmt.ms(itl.p50)} / {fmt.ms(itl.p95)} / {fmt.ms(itl.p99)} | {fmt.ms(c.summary('tpot').mean)} | {fmt.ms(c.summary('e2e').p50, 0)}"
            f" | {fmt.num(d['output_tok_s'])} | {fmt.num(d['requests_s'], 2)} | {good}"
            f" | {fmt.pct(c.server_figures.get('kv_usage_peak'))} | {fmt.num(c.server_figures.get('waiting_peak'), 0)}"
            f" | {fmt.num(c.server_figures.get('preemptions'), 0)} | {fmt.pct(c.server_figures.get('prefix_hit'))} |"
        )
    return "\n".join(lines)


def write_outputs(args: Options, cells: list[Cell], env: dict) -> bool:
    """Each file asked for, whole; False, said in one line, where one cannot be written."""
    rows = [c.flat() for c in cells]
    for kind in args.output:
        path = f"{args.out}.{kind}"
        if kind == "json":
            data = {"environment": env, "results": rows, "requests": [[{**vars(r), "tpot_s": _none_if_nan(r.tpot_s)} for r in c.requests] for c in cells]}
            text = json.dumps(fmt.strict_json(data), indent=2, default=str, allow_nan=False)  # a failed request's TTFT is NaN
        elif kind == "jsonl":
            text = "".join(json.dumps({**row, "environment": env}, default=str, allow_nan=False) + "\n" for row in rows)
        else:
            text = csv_text(rows, "server")
        if not write_file(path, text):
            return False
    return True


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
        written = write_outputs(args, cells, env)
        return 0 if written and all(r.ok for c in cells for r in c.requests) else 1
    finally:
        await servers.aclose()
