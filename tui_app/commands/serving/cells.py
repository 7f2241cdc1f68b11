"""A serving-bench cell measured round by round on one server (its requests read off the session
as they end, its /metrics window and peaks over its rounds), and the tables and files at the end."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from monitors.servers import MetricsWindow
from tui_app.commands.serving.tables import Cell, Request, markdown, reasoning_markdown, write_outputs, xray_markdown
from tui_app.core import fmt


@dataclass
class Plan:
    """What the run was asked, checked before any server is touched."""

    slo: dict
    concurrencies: list[int]
    texts: list[str] | None
    rates: list[float] | None  # --sweep's steps
    conversations: list | None = None  # --dataset's
    trace: list | None = None  # --trace's items
    notes: list[str] = field(default_factory=list)


@dataclass
class Measuring:
    """A cell being measured on one server: its rounds come in between the other servers' (round k
    of each back to back, so a ratio's pair shares the machine's moment), its /metrics window and
    peaks span them all."""

    cell: Cell
    window: MetricsWindow
    peaks: dict = field(default_factory=dict)


async def measure_round(client, session, run: Measuring, items: list, concurrency: int, on_done=None, stop=None) -> str | None:
    """One round of `items` on `client` into `run.cell` (its requests tagged with the round);
    why it stopped early, or None."""
    from tui_app.commands.serving.loadgen import run_round

    cell, window, peaks = run.cell, run.window, run.peaks

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

    round_no = len(cell.round_walls)
    first_sent: list[int] = []
    requests: list[Request] = []

    def finished(sent) -> None:
        # Read off the session as each ends, then let the session forget it: a long bench's memory stays bounded.
        fin = sent.fin
        rec = session.timer.runs.pop(fin.run_id, None) if fin is not None else None
        if rec is not None:
            st = rec.total
            first_sent.append(rec.started.t_ns)
            d = fin.server or {}
            requests.append(
                Request(
                    fin.run_id,
                    rec.started.t_ns / 1e9,
                    fin.stop_reason in ("eos", "max tokens"),
                    fin.prompt_tokens,
                    fin.n_tokens,
                    st.ttft_s,
                    list(st.itl_s),
                    (rec.last_t_ns - rec.started.t_ns) / 1e9,
                    round=round_no,
                    cached_tokens=d.get("cached_tokens") if isinstance(d.get("cached_tokens"), int) else None,
                    late_s=None if sent.planned_s is None else rec.started.t_ns / 1e9 - sent.planned_s,
                    conversation=sent.item.conversation,
                    turn=sent.item.turn,
                    stop_reason=fin.stop_reason,
                    ttfa_s=st.ttfa_s,
                    thinking_tokens=st.phase_tokens.get("thinking", 0),
                )
            )
        if on_done is not None:
            on_done(sent, requests[-1] if rec is not None else None)

    watcher = asyncio.create_task(watch())
    try:
        _, wall, why = await run_round(client, items, concurrency, finished, stop)
    finally:
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
    if first_sent:  # from the round's first send, rounds one after another
        first = min(first_sent) / 1e9
        for r in requests:
            r.sent_s += cell.wall_s - first
    await _accounted(client, session, requests)
    requests.sort(key=lambda r: r.sent_s)
    cell.requests.extend(requests)
    cell.round_walls.append(wall)
    cell.stopped = cell.stopped or why
    prompt = [r.prompt_tokens for r in cell.requests if r.prompt_tokens is not None]
    cell.prompt_tokens = round(sum(prompt) / len(prompt)) if prompt else 0
    new = [r.tokens for r in cell.requests if r.ok]
    if new and cell.new_tokens == 0:
        cell.new_tokens = round(sum(new) / len(new))
    return why


async def warm_up(client, session, items: list) -> None:
    """Requests of the cell's own kind, one at a time, left out of every figure."""
    from tui_app.commands.serving.loadgen import run_round

    if items:
        warm = [replace(it, at_s=None, conversation=-1) for it in items]
        await run_round(client, warm, 1, lambda sent: sent.fin and session.timer.runs.pop(sent.fin.run_id, None))


async def _accounted(client, session, requests: list[Request]) -> None:
    """Each request's X-ray in its row, once the server's spans are in (they come batched, after
    their streams): waits until every request has its span or its "no server span", at most the grace."""
    from tui_app.attach.joiner import settled

    await settled([x for r in requests if (x := session.xray.get(r.run_id)) is not None], client.tracing.joiner)
    for r in requests:
        x = session.xray.get(r.run_id)
        if x is not None:
            r.xray = fmt.strict_json(x.flat())


def report(args, plan: Plan, servers, cells: list[Cell], out, extra: dict | None = None) -> int:
    """The tables on `out` and the files asked for; the exit status."""
    from tui_app.commands.serving import cell_stats

    names = ", ".join(f"{c.levers.server} ({c.engine.name} {c.model})" for c in servers.clients)
    print(
        f"{names}; {args.warmup} warm-up + {args.repeats} round(s) per cell" + (f"; SLO {args.slo}" if plan.slo else "") + "\n",
        file=out,
    )
    print(markdown(cells), file=out)
    if args.repeats > 1:
        print("\n" + cell_stats.intervals_markdown(cells), file=out)
    ratios = cell_stats.ratios(cells) if len(servers.clients) > 1 else []
    if ratios:
        print("\n" + cell_stats.ratios_markdown(ratios), file=out)
    if args.otlp is not None:
        print("\n" + xray_markdown(cells), file=out)
    if any(r.thinking_tokens for c in cells for r in c.requests):
        print("\n" + reasoning_markdown(cells), file=out)
    env = {
        "servers": [{"label": c.levers.server, "engine": c.engine.name, "url": c.root, "model": c.model} for c in servers.clients],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))},
    }
    written = write_outputs(args.out, args.output, cells, env, {"ratios": ratios, **(extra or {})})
    # A sweep's step that stopped early ended its requests in flight: those are not failures.
    failed = any(not r.ok and not (c.stopped and r.stop_reason == "stopped") for c in cells for r in c.requests)
    return 0 if written and not failed else 1
