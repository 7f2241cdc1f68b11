"""The load generator of `tokentop bench --endpoint`: sends one round of a workload to one server.

Closed loop: `concurrency` clients, each sending its next request (or conversation) when its last
one ends. Open loop (a rate's arrivals, a trace): each request leaves at its own time whatever the
server's state, as real traffic does. A conversation's later turns leave as soon as the turn before
has ended, each with the conversation so far before its own text.

Timing: a request's send time is its RunStarted (the attach client's clock, which TTFT runs from).
Each request sleeps to SPIN_S short of its send, then yields to the loop until the time: asyncio's
own timers wake up to a millisecond late (epoll waits in whole milliseconds), which a send error
of ≤ 1 ms p99 cannot afford (benchmarks/serving/generator_capacity.py measures it).

Python's collector: a full collection walks every object the process holds (the client, the
workload, the imports), 11-13 ms here, about once in 4 s at 100-200 req/s, and delays the requests
due then (at 100 req/s one was 14 ms late). A round runs with the heap as it was at its start
frozen, so a collection walks only what the round made; the heap is thawed after it, so nothing the
round let go stays uncollected.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

from monitors.events import RunFinished
from tui_app.commands.serving.workloads import Item

SPIN_S = 0.002
TURN_SEPARATOR = "\n\n"


@dataclass
class Sent:
    item: Item
    fin: RunFinished | None
    planned_s: float | None  # the planned send time on the perf_counter clock (RunStarted's); None in a closed loop
    prompt: str  # as sent: a later turn's with its conversation before it


async def _until(t: float) -> None:
    """Return at perf_counter() ≥ t: sleep most of the way, then yield to the loop until then."""
    delay = t - time.perf_counter() - SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while time.perf_counter() < t:
        await asyncio.sleep(0)


@contextlib.contextmanager
def frozen_heap():
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def run_round(
    client,
    items: list[Item],
    concurrency: int,
    on_done: Callable[[Sent], None] | None = None,
    stop: Callable[[], str | None] | None = None,
) -> tuple[list[Sent], float, str | None]:
    """Send `items` (every text filled in), return what was sent, the round's wall time (from its
    start to its last request's end) and why it stopped early (`stop` said so), or None."""
    from tui_app.requests import RunRequest

    with frozen_heap():
        groups: dict[int, list[Item]] = {}
        singles: list[list[Item]] = []
        for it in items:
            if it.conversation >= 0:
                groups.setdefault(it.conversation, []).append(it)
            else:
                singles.append([it])
        # Conversations and single requests in the order their first request comes.
        order = sorted([*singles, *groups.values()], key=lambda g: g[0].at_s or 0.0)
        done: list[Sent] = []
        stopped: list[str] = []
        t0 = time.perf_counter()

        def halted() -> bool:
            if not stopped and stop is not None:
                why = stop()
                if why:
                    stopped.append(why)
            return bool(stopped)

        async def one(item: Item, prompt: str) -> Sent:
            planned = None if item.at_s is None else t0 + item.at_s
            req = RunRequest(prompt=prompt, max_new_tokens=item.new_tokens, ignore_eos=True)
            sent = Sent(item, await client.run(req), planned, prompt)
            done.append(sent)
            if on_done is not None:
                on_done(sent)
            return sent

        async def conversation(group: list[Item]) -> None:
            history = ""
            for item in sorted(group, key=lambda i: i.turn):
                if item.at_s is not None and item.turn == 0:
                    await _until(t0 + item.at_s)
                if halted():
                    return
                prompt = history + TURN_SEPARATOR + (item.text or "") if history else (item.text or "")
                sent = await one(item, prompt)
                if sent.fin is None or sent.fin.stop_reason not in ("eos", "max tokens"):
                    return  # a failed turn has no reply to carry on from
                history = prompt + sent.fin.text

        if all(g[0].at_s is None for g in order):
            queue = list(order)

            async def worker() -> None:
                while queue and not halted():
                    await conversation(queue.pop(0))

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            # Every request waits on its own timer and sends itself: no hop through a dispatcher
            # between its time coming and its send.
            tasks = [asyncio.create_task(conversation(group)) for group in order]
            waiting = asyncio.gather(*tasks, return_exceptions=True)
            while not waiting.done():  # a stop mid-round ends the requests in flight too
                await asyncio.wait([waiting], timeout=0.1)
                if not waiting.done() and halted():
                    for t in tasks:
                        t.cancel()
            errors = [e for e in await waiting if isinstance(e, Exception)]
            if errors:
                raise errors[0]
        wall = time.perf_counter() - t0
        return done, wall, stopped[0] if stopped else None
