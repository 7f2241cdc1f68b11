"""`tokentop bench --endpoint URL --live`: the attach TUI while the bench's load runs. The bench
runs in a process of its own beside the UI (as an attached server's client does), its events feed
the TUI's panes (the servers, the streams, the runs), its progress shows as a bar with the cell and
the time left in the status line; its tables and files come when it ends, printed once the TUI has
closed. Without a terminal, the bench runs as without --live (a progress line per cell on stderr).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from tui_app.commands.serving.progress import WIDTH, eta_text
from tui_app.core.options import UiOptions
from tui_app.core.sources import AttachSource
from tui_app.requests import Shutdown

NO_TUI = "`tokentop bench --endpoint URL` without --live"
DONE = "done: the tables follow when the TUI closes"


@dataclass
class Job:
    """What the bench's process is handed (it is spawned: its options go pickled)."""

    opts: object  # command.Options
    lengths: list
    out: str  # where its tables go, read back once the TUI has closed
    status: str  # its exit status, as JSON


def progress_text(st: dict, done: bool = False) -> str:
    filled = WIDTH * st["done"] // max(st["total"], 1)
    then = DONE if done else f"~{eta_text(st['left_s'])} left"
    return f"[{'█' * filled}{'·' * (WIDTH - filled)}] cell {st['cell']}/{st['cells']} {st['label']} {st['cell_done']}/{st['cell_total']}, {then}"


class BenchSource(AttachSource):
    """The bench's process as the TUI's source: its levers are the bench's own, not switched live.
    Closed after the TUI (the terminal is the shell's again), it prints the bench's tables: the
    CLI may end the process right after (a stuck input thread), so nothing is left for later."""

    kind = "server"
    printed = False

    def restart(self, levers, first_run_id: int = 1) -> None:
        pass

    def number_from(self, first_run_id: int) -> None:
        pass

    def bench_code(self) -> int | None:
        """The bench's exit status once it has ended, else None."""
        try:
            with open(self.config.status, encoding="utf-8") as f:
                return int(json.load(f)["code"])
        except (OSError, ValueError, KeyError):
            return None

    def close(self) -> None:
        super().close()
        if not self.printed and os.path.exists(self.config.out):
            self.printed = True
            with open(self.config.out, encoding="utf-8") as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()


def serve_bench(job: Job, commands, events, log_path: str | None, run: Callable) -> None:
    """The bench's process: `run` is command.run_endpoint_bench, its events to the TUI."""
    from tui_app.process import quiet_process

    if quiet_process(log_path, events):
        asyncio.run(_run(job, commands, events, run))


async def _run(job: Job, commands, events, run: Callable) -> None:
    from monitors.events import EngineError, Phase
    from tui_app.attach.loop import _Batches, _get
    from tui_app.core.options import UsageError

    out = _Batches(events.put)
    flusher = asyncio.create_task(out.run())
    loop = asyncio.get_running_loop()
    code = 2
    with open(job.out, "w", encoding="utf-8") as tables:
        sys.stderr = tables  # what the bench says (a server it cannot reach, a file it cannot write) follows its tables

        last: dict = {}

        def progress(st: dict) -> None:
            last.update(st)
            out(Phase(name="bench", detail=progress_text(st), done=False))

        bench = asyncio.create_task(run(job.opts, [tuple(x) for x in job.lengths], emit=out, out=tables, progress_sink=progress))

        async def until_shutdown() -> None:
            while not isinstance(await loop.run_in_executor(None, _get, commands), Shutdown):
                pass

        quit_ = asyncio.create_task(until_shutdown())
        try:
            await asyncio.wait([bench, quit_], return_when=asyncio.FIRST_COMPLETED)
            if bench.done():
                code = bench.result()
                tables.flush()
                _status(job, code)
                # The bar stays, full: a bench shorter than the UI's frames (or a UI held up) may
                # show no other picture of it before the app closes.
                done = progress_text(last, done=True) if last else DONE
                out(Phase(name="bench", detail=done, done=True))
            else:
                bench.cancel()
                await asyncio.gather(bench, return_exceptions=True)
                print("tokentop: the bench was stopped before its end (q)", file=tables)
        except UsageError as exc:
            out(EngineError(message=str(exc), fatal=True))
            print(f"tokentop: {exc}", file=tables)
        finally:
            sys.stderr = sys.__stderr__
            quit_.cancel()
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            out.flush()
    _status(job, code)


def _status(job: Job, code: int) -> None:
    with open(job.status, "w", encoding="utf-8") as f:
        json.dump({"code": code}, f)


def run_live(opts, lengths, target: Callable, headless: Callable[[], int]) -> int:
    """The TUI over the bench (`target`: the bench's process, command.bench_process), then
    its tables; without a terminal, `headless()`: the bench as without --live."""
    from tui_app.core.terminal import cannot_draw
    from tui_app.folders import cache_root
    from tui_app.ui.launch import run_tui

    why = cannot_draw()
    if why:
        print(f"tokentop: --live: {why}; a progress line per cell on stderr instead", file=sys.stderr)
        return headless()
    log_dir = cache_root()
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tokentop-bench-") as tmp:
        job = Job(opts, [list(x) for x in lengths], os.path.join(tmp, "tables.md"), os.path.join(tmp, "status.json"))
        source = BenchSource(job, str(log_dir / "attach.log"), target=target)
        view = UiOptions(record=None, no_record=True, fps="auto", ascii=False, hz=4.0, out_dir=None, auto=False)
        run_tui(view, lambda: source, NO_TUI, make_app=make_app)
        source.close()  # printed its tables, if the TUI's own close did not
        code = source.bench_code()
        return 1 if code is None else code  # None: stopped before its end, its tables not whole


def make_app(opts: UiOptions, source, recorder=None):
    from monitors.sampler import Sampler
    from tui_app.ui.bench_app import BenchApp
    from tui_app.ui.look import look_of

    return BenchApp(source, None, recorder=recorder, sampler=Sampler(hz=opts.hz), fps=opts.fps, out_dir=opts.out_dir, look=look_of(opts))
