"""TokentopApp: layout, key bindings → actions, events → widgets.

The app is a view. It drains the engine's event queue once per frame (never per token), feeds
the events to the Session, and redraws only the panes whose data changed, at --fps at most.
"""

from __future__ import annotations

import json
import signal
import time
from collections import deque
from dataclasses import asdict, replace
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Container, Horizontal
from textual.widgets import Static

from monitors.events import (
    BATCH_SIZES,
    QUANT_LEVELS,
    SPEC_MODES,
    EngineError,
    EngineReady,
    LeverChanged,
    LeverRefused,
    Phase,
    RunFinished,
    RunStarted,
    Sampled,
    Step,
)
from monitors.files import write_error, write_whole
from monitors.system import trim_heap
from tui_app.core import fmt
from tui_app.core.session import Session, short_value
from tui_app.process import yield_to_children
from tui_app.ui.frames import FramePacer, PacedApp
from tui_app.ui.screens.confirm import ConfirmScreen
from tui_app.ui.screens.help import HelpScreen
from tui_app.ui.screens.prompt import PromptScreen
from tui_app.ui.screens.xray import XrayScreen
from tui_app.ui.widgets.key_bar import KeyBar
from tui_app.ui.widgets.kv_chart import KVChart
from tui_app.ui.widgets.latency_chart import LatencyChart
from tui_app.ui.widgets.memory_chart import MemoryChart
from tui_app.ui.widgets.runs_table import RunsTable
from tui_app.ui.widgets.server_pane import ServerPane
from tui_app.ui.widgets.status_bar import StatusBar
from tui_app.ui.widgets.token_stream import TokenStream
from tui_app.ui.widgets.util_chart import UtilChart
from tui_app.ui.widgets.waterfall import Waterfall

CHARTS = ("latency", "kv", "memory", "util")
# The command palette's entries: sentences, with the key as their help line.
PALETTE = {
    "lever('cache')": "Switch the KV cache on or off",
    "lever('compile')": "Switch the compiled decode step on or off",
    "lever('quant')": "Cycle the weight quantization: off, int8, int4",
    "lever('spec')": "Cycle speculative decoding: off, prompt lookup, draft model",
    "lever('batch')": "Cycle the batch size: 1, 2, 4, 8",
    "preset": "Switch the prompt length preset",
    "next_server": "Send the next run to the next attached server",
    "new_prompt": "Type a new prompt",
    "rerun": "Run the prompt again",
    "pause": "Pause or resume generation",
    "auto": "Switch auto-repeat on or off",
    "next_view": "Show the next chart (small terminals)",
    "probe": "Measure the memory read rate again",
    "export": "Export the session as JSON",
    "xray": "X-ray: the last run's requests as a waterfall, server phases under the client's chunks",
    "screenshot": "Save a screenshot (SVG)",
    "restart": "Restart the engine",
    "help": "Show the keys and what each pane shows",
}
NARROW_W, NARROW_H = 120, 34
TINY_W, TINY_H = 60, 16


def _cycle(values, current):
    values = list(values)
    return values[(values.index(current) + 1) % len(values)] if current in values else values[0]


class TokentopApp(PacedApp):
    # A path of its own: Textual reads a relative one beside the subclass (the demo's app lives in commands/).
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "tokentop"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("k", "lever('cache')", "cache"),
        Binding("c", "lever('compile')", "compile"),
        Binding("w", "lever('quant')", "quant"),
        Binding("s", "lever('spec')", "spec"),
        Binding("b", "lever('batch')", "batch"),
        Binding("l", "preset", "length"),
        Binding("t", "next_server", "next server", show=False),
        Binding("n", "new_prompt", "prompt"),
        Binding("r", "rerun", "rerun"),
        Binding("space", "pause", "pause"),
        Binding("a", "auto", "auto"),
        Binding("v", "next_view", "view", show=False),
        Binding("m", "probe", "measure mem bw", show=False),
        Binding("e", "export", "export"),
        Binding("x", "xray", "x-ray"),
        Binding("ctrl+s", "screenshot", "screenshot", show=False),
        Binding("R", "restart", "restart", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
        Binding("ctrl+q", "quit", "quit", show=False, priority=True),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        source,
        request=None,
        *,
        recorder=None,
        sampler=None,
        fps: float | str = 8.0,
        auto: bool = False,
        prompt_file: str | None = None,
        out_dir: str | None = None,
        history: int = 4000,
        ascii: bool = False,
    ):
        super().__init__()
        self.ascii = ascii
        self.source = source
        self.request = request
        self.sampler = sampler
        self.pacer = FramePacer(self, fps)  # --fps: a number, or "auto" (frames.py)
        self.auto = auto
        self.prompt_file = prompt_file
        self.out_dir = out_dir  # None: the recordings folder (TOKENTOP_DATA moves it)
        self.session = Session(recorder=recorder, history=history)
        if recorder is not None:  # a full disk: said here, in the status bar, never on the terminal under the TUI
            recorder.on_stop = self._recording_stopped
        self.running = False
        self.paused = False
        self.view = 0
        self.state = "starting engine…"
        self._last_sample_t = 0
        self._table_t = 0.0
        self._wanted: dict[str, object] = {}
        self._text: list[str] = []  # this frame's tokens, added to the text pane once per frame
        self._mode = ""
        self._phase_since: float | None = None  # when the phase in progress began, on this clock
        self.told: deque[str] = deque(maxlen=50)  # what notify() said, for tests and export

    def notify(self, message: str, **kwargs) -> None:
        self.told.append(message)
        super().notify(message, **kwargs)

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        # References, not queries: with a modal open, queries search the modal's screen.
        self.status = StatusBar(id="status")
        self.tokens = TokenStream(id="tokens")
        charts = [
            LatencyChart(self.session, id="latency"),
            # On a server the KV pane is its own figures: its cache is not ours to measure.
            ServerPane(self.session, id="kv") if self.source.kind == "server" else KVChart(self.session, id="kv"),
            MemoryChart(self.session, id="memory"),
            UtilChart(self.session, id="util"),
        ]
        self.panes = {w.id: w for w in (self.tokens, RunsTable(self.session, id="runs"), *charts)}
        yield self.status
        with Horizontal(id="main"):
            yield self.tokens
            with Container(id="charts"):
                yield from charts
        yield self.panes["runs"]  # full width: its columns are the comparison the levers exist for
        yield Static("terminal too small for the charts: enlarge it (60×16 or more)", id="tiny-note")
        self.key_bar = KeyBar(id="keys")
        yield self.key_bar

    def on_mount(self) -> None:
        self.source.start()
        if self.sampler is not None:
            self.sampler.watch("engine", self.source.pid)
            self.sampler.start()
        yield_to_children()
        self.pacer.start()
        self._apply_size()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                import asyncio

                asyncio.get_running_loop().add_signal_handler(sig, self.exit)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def on_resize(self) -> None:
        self._apply_size()

    def _apply_size(self) -> None:
        if not self.screen_stack:
            return
        w, h = self.size
        mode = "tiny" if (w < TINY_W or h < TINY_H) else "narrow" if (w < NARROW_W or h < NARROW_H) else "wide"
        if mode == self._mode:
            return
        self._mode = mode
        screen = self.screen_stack[0]
        screen.set_class(mode == "tiny", "-tiny")
        screen.set_class(mode != "wide", "-narrow")
        self._show_view()
        if self.key_bar.is_mounted:
            self.key_bar.draw()  # v shows where it does something

    def _show_view(self) -> None:
        single = self._mode != "wide"
        for i, name in enumerate(CHARTS):
            chart = self.panes[name]
            chart.display = (not single) or i == self.view
            chart.dirty = True

    # ------------------------------------------------------------ the frame
    def first_data_in(self) -> bool:
        """The first figures are drawn when they come (a server's first answer), not a frame later."""
        return self.session.ready is not None and (self.source.kind != "server" or bool(self.session.server))

    def feed(self) -> list:
        self._apply_size()  # cheap when the size class is unchanged; resize events do not always reach the App
        events = self.source.drain()
        if self.sampler is not None:
            from monitors.sampler import to_event

            latest = self.sampler.latest()
            if latest is not None and latest.t_ns != self._last_sample_t:
                self._last_sample_t = latest.t_ns
                events.append(to_event(latest))
        for ev in events:
            self.session.feed(ev)
            self._on_event(ev)
        self._flush_text()
        death = self.source.death()
        if death:
            self._engine_died(death)
        now = time.monotonic()
        if self.running and now - self._table_t > 1.0:
            self._table_t = now
            self._mark("runs")
        if not self.source.live and self.source.done and self.state != "replay finished":
            self.state = "replay finished"
        return events

    def tick(self) -> None:
        self.feed()
        for widget in self.panes.values():
            widget.redraw()
        self.show_status()

    def show_status(self) -> None:
        phase = self.session.phase
        state = self.state
        if phase is not None and not phase.done and self._phase_since is not None and state.startswith(f"{phase.name}: "):
            # A first compile takes a minute or more: the clock shows it is working, not stuck.
            state = f"{state} {time.monotonic() - self._phase_since:.0f} s"
        self.status.show(self.session, state, self.request.preset if self.request else "replay", self.auto, self._wanted, self.pacer.status_note())

    def _flush_text(self) -> None:
        """The frame's tokens into the text pane at once: a fast server sends thousands a second."""
        if self._text:
            self.tokens.add_text("".join(self._text))
            self._text.clear()

    def _mark(self, *names: str) -> None:
        for name in names:
            self.panes[name].dirty = True

    def _on_event(self, ev) -> None:
        tokens = self.tokens
        if isinstance(ev, Step):
            if ev.text and not (self.session.levers.server and ev.segment):  # a server run's first stream is the one shown
                self._text.append(ev.text)
            self._mark("latency", "kv")
            return
        self._flush_text()  # what follows in the pane comes after the text so far
        if isinstance(ev, Sampled):
            self._mark("memory", "util")
        elif isinstance(ev, RunStarted):
            self.running = True
            self.state = f"run {ev.run_id}: generating"
            tokens.add_prompt(ev.run_id, ev.prompt_text, ev.levers.label())
            self._mark("runs", "latency", "kv")
        elif isinstance(ev, RunFinished):
            self.running = False
            self.state = f"run {ev.run_id} done ({ev.stop_reason})" + (" · auto" if self.auto else "")
            self.session.trim()
            trim_heap()  # the UI's own RSS then tracks its live memory, which the soak checks stays flat
            self._mark("runs", "memory")
            if self.auto and not self.paused and self.source.live:
                self.set_timer(0.3, self._auto_next)
        elif isinstance(ev, LeverChanged):
            self._wanted.pop(ev.lever, None)
            if ev.lever == "server":
                self._follow_server()
            if ev.run_id is not None:
                tokens.add_mark(f"{ev.lever}→{short_value(ev.value)}")
                self.state = f"run {ev.run_id}: generating"  # not the preparation phase that came before
            else:
                self.state = f"{ev.lever} → {short_value(ev.value)} for the next run (r starts it)"
            self._mark("runs", "latency")
        elif isinstance(ev, LeverRefused):
            self._wanted.pop(ev.lever, None)
            self.notify(ev.reason, title=f"{ev.lever} refused", severity="warning")
        elif isinstance(ev, Phase):
            self.state = f"{ev.name}: {ev.detail}" + (f" ({ev.seconds:.1f} s)" if ev.done else "…")
            self._phase_since = None if ev.done else time.monotonic()
            if ev.name == "pause":
                self.state = "paused" if not ev.done else "generating"
        elif isinstance(ev, EngineReady):
            if ev.server:
                if len(self.session.servers) == 2:  # t now moves between them
                    self.key_bar.draw()
                self.state = f"{ev.model} on the {ev.device} server at {ev.server['url']}"
                self.sub_title = f"{ev.model} · {ev.device} · {ev.server['url']}"
                self._follow_server()
            else:
                self.state = f"{ev.model} on {fmt.where(ev)} ({ev.dtype}) ready in {ev.load_s:.1f} s"
                self.sub_title = f"{ev.model} · {fmt.where(ev)} · {ev.dtype}"
            if self.source.live and self.request is not None and not self.running:  # compared servers: one ready each
                self.start_run()
        elif isinstance(ev, EngineError):
            if not self.session.current or self.session.current.finished is not None:
                self.running = False
            tokens.add_mark(ev.message.splitlines()[0], error=True)
            self.notify(ev.message.splitlines()[0], title="engine", severity="error", timeout=8)
            if ev.fatal:
                self.state = "engine failed — fix the cause and press R to restart, or q to quit"

    def key_applies(self, action: str) -> bool:
        """Whether a key does something here (the key bar leaves out those that do not)."""
        if action == "next_view":
            return self._mode != "wide"
        if action == "next_server":
            return len(self.session.servers) > 1
        if action == "xray":
            return self.source.kind == "server"
        return True

    def _follow_server(self) -> None:
        """The memory pane and the leak detector follow the active server's process when it runs here."""
        server = self.session.active_server()
        if self.source.live and server is not None:
            self.source.server_pid = server.get("pid")
            if self.sampler is not None:
                self.sampler.watch("engine", self.source.server_pid)

    def _engine_died(self, message: str) -> None:
        self.running = False
        self.session.engine_died(message)
        self.state = f"{message} — press R to restart; finished runs are kept"
        self.tokens.add_mark(message, error=True)
        self.notify(f"{message}. Press R to restart the engine.", title="engine", severity="error", timeout=15)
        self._mark("runs")

    def _recording_stopped(self, line: str) -> None:
        self.session.say(line, error=True)
        self.notify(line, title="recording", severity="error", timeout=30)

    def _auto_next(self) -> None:
        if self.auto and not self.running and not self.paused:
            if len(self.session.servers) > 1:  # compared servers take turns on the same prompt
                self.action_next_server()
            self.start_run()

    def start_run(self) -> None:
        if self.request is None or not self.source.live:
            return
        if self.running:
            self.source.send("stop")
        self.source.send("run", self.request)
        self.running = True

    # ------------------------------------------------------------ actions
    def _refuse(self, lever: str, reason: str) -> None:
        self.notify(reason, title=f"{lever} refused", severity="warning")

    def action_lever(self, name: str) -> None:
        if not self.source.live:
            self._refuse(name, "replay shows recorded levers; they cannot be switched")
            return
        current = self._wanted.get(name, getattr(self.session.levers, name))
        value = {
            "cache": lambda v: not v,
            "compile": lambda v: not v,
            "quant": lambda v: _cycle(QUANT_LEVELS, v),
            "spec": lambda v: _cycle(SPEC_MODES, v),
            "batch": lambda v: _cycle(self._batch_sizes(), v),
        }[name](current)
        self._wanted[name] = value
        self.source.send("lever", name, value)
        if not self.running:  # answered now; the engine's LeverChanged or LeverRefused follows
            self.state = f"{name} → {short_value(value)} for the next run (r starts it)"

    def action_probe(self) -> None:
        if not self.source.live or (self.session.ready is not None and self.session.ready.server):
            self._refuse("bandwidth", "tokentop measures the memory read rate of its own engine only (not a replay's or a server's)")
            return
        self.source.send("probe")
        self.state = "measuring the memory read rate" + (" at the next token" if self.running else "")

    def _batch_sizes(self) -> tuple[int, ...]:
        """Batch sizes, or on a server the numbers of concurrent streams it is asked for."""
        server = self.session.ready.server if self.session.ready else None
        return tuple(server["concurrency"]) if server else BATCH_SIZES

    def action_next_server(self) -> None:
        labels = list(self.session.servers)
        if len(labels) < 2:
            self._refuse("server", "t moves between attached servers: tokentop attach URL_A URL_B compares two")
            return
        current = self._wanted.get("server", self.session.levers.server)
        value = labels[(labels.index(current) + 1) % len(labels)] if current in labels else labels[0]
        self._wanted["server"] = value
        self.source.send("lever", "server", value)

    def action_preset(self) -> None:
        if self.request is None:
            return
        presets = ["short", "long"] + (["file"] if self.prompt_file else [])
        self.request = replace(self.request, prompt=None, preset=_cycle(presets, self.request.preset))
        if self.running:  # a prompt cannot change mid-run: the run starts again on the new one
            self.notify(f"prompt {self.request.preset}: run {self._current_id()} stopped, a new run starts")
            self.start_run()
        else:  # as a lever pressed while idle
            self.state = f"prompt {self.request.preset} for the next run (r starts it)"

    def action_new_prompt(self) -> None:
        if self.request is None:
            return

        def done(text: str | None) -> None:
            if text:
                self.request = replace(self.request, prompt=text, preset="custom")
                self.start_run()

        self.push_screen(PromptScreen(), done)

    def _current_id(self) -> int | str:
        cur = self.session.current
        return cur.started.run_id if cur is not None else "?"

    def action_rerun(self) -> None:
        if not self.source.live:
            self.notify("a replay cannot run the prompt again")
            return
        if self.running:
            self.notify(f"run {self._current_id()} stopped; the prompt runs again")
        self.start_run()

    def action_pause(self) -> None:
        if not self.source.can_pause:
            self.source.send("pause")  # the source says why not
            return
        self.paused = not self.paused
        if self.source.live:
            self.source.send("pause" if self.paused else "resume")
        else:
            if getattr(self.source, "step_mode", False):
                self.source.advance()
                self.paused = False
                return
            self.source.pause(self.paused)
        self.state = "paused" if self.paused else ("generating" if self.running else "idle")

    def action_auto(self) -> None:
        self.auto = not self.auto
        self.notify(f"auto-repeat {'on' if self.auto else 'off'}")
        self._auto_next()

    def action_next_view(self) -> None:
        if self._mode == "wide":
            self.notify(f"all four charts already show; v cycles them on a terminal smaller than {NARROW_W}×{NARROW_H}")
            return
        if self._mode == "tiny":
            self.notify(f"the terminal is too small for charts: enlarge it to {TINY_W}×{TINY_H} or more")
            return
        self.view = (self.view + 1) % len(CHARTS)
        self._show_view()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_xray(self) -> None:
        ids = self.session.xray.run_ids()
        if not ids:
            self.notify("the X-ray shows the requests of an attached server's runs (tokentop attach URL), once one has run")
            return
        self.push_screen(XrayScreen(self.session, Waterfall(self.session, ids[-1], id="waterfall")))

    def action_restart(self) -> None:
        if not self.source.live:
            self.notify("a replay has no engine to restart")
            return
        if self.session.fatal is None and getattr(self.source, "alive", lambda: False)():
            cur = self.session.current
            in_flight = f" Run {cur.started.run_id}, in flight, is stopped." if cur is not None and cur.finished is None else ""
            question = f"The engine is working. Restart it?{in_flight} Finished runs are kept; compiled and quantized variants are rebuilt when next used."
            self.push_screen(ConfirmScreen(question), lambda yes: self._restart() if yes else self.notify("engine not restarted"))
            return
        self._restart()

    def _restart(self) -> None:
        """A new engine process, numbering its runs after the last one: ids stay unique in the runs
        table, the export and the recording (a second run 1 used to replace the first)."""
        self.state = "restarting engine…"
        self.session.engine_died("restarting", why="stopped by the engine restart")
        self.running = False
        self.source.restart(self.session.levers, first_run_id=self.session.next_run_id)
        self.session.fatal = None
        if self.sampler is not None:
            self.sampler.watch("engine", self.source.pid)

    def _out_folder(self, what: str):
        """The folder exports and screenshots go to, created; None after saying why it cannot be written."""
        from tui_app.folders import FolderError, recordings_dir, require

        try:
            return require(Path(self.out_dir) if self.out_dir else recordings_dir(), what, "--out-dir" if self.out_dir else "--out-dir or TOKENTOP_DATA")
        except FolderError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return None

    def action_export(self) -> None:
        from tui_app.folders import stamped

        folder = self._out_folder("the export")
        if folder is None:
            return
        path = stamped(folder, "export", "json")
        try:
            export_session(self.session, str(path))
        except OSError as exc:
            self.notify(f"export not written: {write_error(exc, path)}", severity="error", timeout=15)
            return
        self.notify(f"session exported to {path}")

    def action_screenshot(self) -> None:
        from tui_app.folders import stamped

        folder = self._out_folder("the screenshot")
        if folder is None:
            return
        path = stamped(folder, "screenshot", "svg")
        try:
            write_whole(path, self.export_screenshot())
        except OSError as exc:
            self.notify(f"screenshot not written: {write_error(exc, path)}", severity="error", timeout=15)
            return
        self.notify(f"screenshot saved to {path}")

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            if b.action in PALETTE:
                yield SystemCommand(PALETTE[b.action], f"key: {self.get_key_display(b)}", lambda a=b.action: self.run_action(a))

    async def action_quit(self) -> None:
        self.exit()

    def on_unmount(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self.source.close()
        if self.session.recorder is not None:
            self.session.recorder.close()


def export_session(session: Session, path: str) -> None:
    rows = []
    for row in session.rows():
        s = row.stats
        itl = s.itl
        rows.append(
            {
                "run": row.label,
                "levers": asdict(s.levers),
                "levers_end": asdict(row.end_levers or s.levers),
                "prompt_tokens": s.prompt_tokens,
                "new_tokens": s.n_tokens,
                "ttft_s": s.ttft_s,
                "itl_mean_s": itl.mean,
                "itl_p50_s": itl.p50,
                "itl_p95_s": itl.p95,
                "itl_p99_s": itl.p99,
                "decode_tok_s": s.decode_tps,
                "e2e_s": s.e2e_s,
                "kv_bytes": s.kv_bytes,
                "accept_rate": s.accept_rate,
                "peak_rss": row.finished.peak_rss if row.finished else None,
                "perplexity": row.finished.perplexity if row.finished else None,
                "ended": row.finished.stop_reason if row.finished else row.note,
                "output": row.finished.diff_note if row.finished else row.note,
            }
        )
    data = {
        "engine": asdict(session.ready) if session.ready else None,
        "leak": asdict(session.verdict) if session.verdict else None,
        "runs": rows,
    }
    write_whole(path, json.dumps(fmt.strict_json(data), indent=2, default=str, allow_nan=False))


def make_app(args, source, recorder=None) -> TokentopApp:
    """The app for parsed command-line arguments (the entry point; `serve` runs the same command)."""
    from monitors.sampler import Sampler
    from tui_app.core.options import run_request

    return TokentopApp(
        source,
        run_request(args),
        recorder=recorder,
        sampler=Sampler(hz=args.hz or 4.0),
        fps=args.fps,
        auto=args.auto,
        prompt_file=args.prompt_file,
        out_dir=args.out_dir,
        ascii=args.ascii,
    )
