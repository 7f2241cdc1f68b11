"""`tokentop bench --endpoint`: the cells measured, round by round, the servers taking turns (round
k of each back to back, so that a ratio's pair shares the machine's moment), then the tables and the
files; or, with --sweep, the rate raised step by step until the SLO breaks (sweep.py).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from monitors.servers import MetricsWindow
from tui_app.commands import workloads as wl
from tui_app.commands.serving_bench import Cell, Prompts, parse_slo, read_prompts
from tui_app.commands.serving_cells import Measuring, Plan, measure_round, report, warm_up
from tui_app.core.options import EXIT_USAGE, UsageError


def check(args) -> Plan:
    """Every option's sense and every file's entries, before connecting: UsageError, one line."""
    from tui_app.commands.sweep import parse_sweep

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


def attach_configs(args) -> list:
    from tui_app.attach import otlp
    from tui_app.attach.client import AttachConfig

    try:
        otlp_address = otlp.checked_address(args)
    except (otlp.ReceiverError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    model = None if args.model == "default" else args.model
    return [
        AttachConfig(
            url=u,
            model=model,
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


async def workload_of(args, plan: Plan, clients: list) -> wl.Workload | None:
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


def planned_requests(args, cp: wl.CellPlan) -> int:
    """A round's requests as planned (the progress bar's and goodput's denominator)."""
    w = cp.workload
    if w is not None:
        return len(w.items) if w.timed or not args.requests else sum(1 for it in w.items if it.conversation < args.requests)
    size = wl.round_size(args, cp)
    return size if size is not None else max(int((args.duration or 0) * (cp.rate or 0)), 1)


async def run_endpoint_bench(args, lengths: list[tuple[int, int]], emit=None, out=None, progress_sink=None) -> int:
    """The bench on the servers; `emit` also gets every event (the --live TUI), the tables go to
    `out` (default stdout), `progress_sink` gets the progress as it changes."""
    from tui_app.attach.client import AttachError, Servers
    from tui_app.commands.progress import Progress
    from tui_app.core.session import Session

    plan = check(args)
    out = out or sys.stdout
    session = Session()

    def feed(ev) -> None:
        session.feed(ev)
        if emit is not None:
            emit(ev)

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
            from tui_app.commands.sweep_run import run_sweep

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
