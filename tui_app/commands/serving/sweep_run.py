"""--sweep on the servers: each server's own sweep (sweep.py says how a step passes), its steps'
cells kept like any others, then the steps, the headroom and the cells."""

from __future__ import annotations

from dataclasses import replace

from monitors.servers import MetricsWindow
from tui_app.attach.tokenizer import Prompts
from tui_app.commands.serving import sweep as sw
from tui_app.commands.serving import workloads as wl
from tui_app.commands.serving.cells import Measuring, Plan, measure_round, report, warm_up
from tui_app.commands.serving.tables import Cell


async def run_sweep(args, plan: Plan, lengths, workload, servers, session, out, progress_sink=None) -> int:
    from tui_app.commands.serving.progress import Progress

    args = replace(args, requests=args.requests or sw.DEFAULT_REQUESTS, duration=None)
    level = args.goodput_level / 100
    p_len, new = lengths[0]
    rates = plan.rates or []
    per_step = args.repeats * args.requests
    progress = Progress(per_step * len(rates) * len(servers.clients), len(rates) * len(servers.clients), sink=progress_sink)
    cells: list[Cell] = []
    verdicts: list[dict] = []
    lines: list[str] = []
    session.xray.limit = max(session.xray.limit, per_step)
    fresh = 0  # rounds so far: each round's texts are its own (no step finds an earlier one's in the prefix cache)
    for client in servers.clients:
        servers.active = servers.clients.index(client)
        prompts = Prompts(client, plan.texts, args.shared_prefix)
        steps: list[dict] = []
        for i, rate in enumerate(rates):
            cp = wl.CellPlan(workload.label if workload else f"{p_len}:{new}", f"r{rate:g}/s", 1, rate, p_len, new, workload)
            cell = Cell(client.levers.server, cp.load, p_len, new, slo=plan.slo, key=cp.key, planned=per_step)
            run = Measuring(cell, MetricsWindow(client.engine, window_s=1e9))
            watch = sw.StepWatch(plan.slo, level, per_step, rate)
            progress.start_cell(f"{client.levers.server} {cp.load}", per_step)

            def done(sent, request, watch=watch) -> None:
                watch.add(request)
                progress.request_done()

            for k in range(args.repeats):
                warm, items = await wl.round_items(args, cp, prompts, k, args.warmup if i == 0 and k == 0 else 0, fresh=fresh)
                fresh += 1
                await warm_up(client, session, warm)
                if await measure_round(client, session, run, items, 1, on_done=done, stop=watch.stop):
                    break
            progress.skip(per_step - len(cell.requests))
            progress.end_cell()
            cells.append(cell)
            steps.append(sw.step_row(cell, rate, level))
            if not steps[-1]["passed"]:
                progress.skip(per_step * (len(rates) - i - 1))
                break
        line, verdict = sw.summary(steps, level, args.slo, client.levers.server)
        lines.append(line)
        verdicts.append(verdict)
        print(f"{client.levers.server}: sweep of {args.sweep} req/s, {args.repeats} round(s) of {args.requests} requests a step\n", file=out)
        print(sw.steps_markdown(steps, plan.slo, level) + "\n", file=out)
    progress.close()
    for line in lines:
        print(line, file=out)
    print(file=out)
    status = report(args, plan, servers, cells, out, {"sweep": verdicts})
    return 1 if any(v["verdict"] == "never met" for v in verdicts) else status
