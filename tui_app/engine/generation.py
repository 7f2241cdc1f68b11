"""The generation engine: a prefill/decode loop that emits an event per step and applies levers
at token boundaries, continuing the same text.

Why our own loop and not `model.generate`: generate() hides its steps (no per-step timing, no
cache object to measure) and cannot change cache type, weights or speculation mid-run. The loop
does one device→host transfer per step (the new token ids), where generate() does about three.

The engine is made of parts it builds when it loads a model and hands what they need:
decoding.py (one step's forward and pick, and the text), lever_control.py (what a lever may do
now, applying it, the weight variants, compiled steps and draft it needs) and quality.py (the
plain greedy reference and perplexity each run is checked against) and batching.py (distinct
prompts batched with the run's own). A run's state between its steps is a `RunState`
(run_state.py); the engine's commands (tui_app.requests) are taken in `Engine.command`.
"""

from __future__ import annotations

import gc
import os
import queue
import time
from collections.abc import Callable, Iterable

import torch

from monitors.events import EngineError, EngineReady, LeverRefused, Levers, RunFinished, RunStarted, now_ns
from monitors.kvcache import model_shape
from monitors.phases import StepPhases, marker_spans, think_span
from monitors.system import rss_bytes, trim_heap
from monitors.text import IncrementalDecoder
from tui_app.engine import bandwidth, devices, lever_rules
from tui_app.engine import levers as lv
from tui_app.engine.anatomy import StepAnatomy, anatomy_refusal
from tui_app.engine.batching import SHARES, ContinuousBatch, Sequence, batch_prompts
from tui_app.engine.config import EngineConfig
from tui_app.engine.decoding import Decoder, PromptError, extend_rows, prompt_tokens
from tui_app.engine.lever_control import MB, LeverControl, Phases, draft_model, freeze
from tui_app.engine.memory import CudaHistory, MemoryWatch, demo_leak, history_refusal
from tui_app.engine.models import eos_ids, load_model, placement, resolve_device, resolve_dtype, weight_counts
from tui_app.engine.quality import Quality
from tui_app.engine.routing import Routing
from tui_app.engine.run_state import RunState
from tui_app.engine.speculative import sliding_layers
from tui_app.requests import Command, Confidence, History, Pause, Probe, Profile, Resume, Run, RunRequest, SetLever, Shutdown, Stop

__all__ = ["Engine", "EngineConfig", "PromptError"]


class _Stop(Exception):
    pass


class Engine:
    def __init__(self, config: EngineConfig, emit):
        self.cfg = config
        self.emit = emit
        self.phases = Phases(self._emit)
        self.pending: list[Command] = []  # taken mid-run, for after it (a new run, a shutdown)
        self._leak: list = []  # --demo-leak's blocks, never freed
        self.history: CudaHistory | None = None  # the allocator's history being recorded (the H key)
        self.anatomy: StepAnatomy | None = None  # the decode steps being profiled, from the next (the p key)
        self._run_id = config.first_run_id - 1  # a restarted engine continues the session's numbering

    def _emit(self, ev) -> None:
        self.emit(ev)  # the engine's current emit: a bench catches refusals by replacing it

    # ---------------------------------------------------------------- loading
    def load(self) -> EngineReady:
        cfg = self.cfg
        self.device = resolve_device(cfg.device)
        devices.make_current(self.device, torch)  # bf16's support is read of the current device
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        self.threads = cfg.threads or max(1, (os.cpu_count() or 1) - 1)
        if self.device == "cpu":
            torch.set_num_threads(self.threads)
        self.phases.start("load", f"loading {cfg.model}")
        loaded = load_model(cfg.model, self.device, self.dtype, lambda m: self.phases.start("load", m), device_map=cfg.device_map, max_memory=cfg.max_memory)
        self.model, self.tok = loaded.model, loaded.tokenizer
        self.marker_spans = marker_spans(self.tok)
        self.placement = placement(self.model)
        # accelerate's hooks move activations between devices, or weights in from disk
        self.split = len(self.placement) > 1 or "disk" in self.placement
        self.gpus = tuple(d for d in self.placement if d.startswith("cuda"))
        if cfg.device_map:  # inputs, sampling and timing go where accelerate put the embeddings
            embed = self.model.get_input_embeddings().weight
            self.device = "cpu" if embed.is_meta else str(embed.device)
            devices.make_current(self.device, torch)
        self.model.generation_config.pad_token_id = self.tok.pad_token_id or self.tok.eos_token_id
        self.phases.done("load", f"{loaded.name} from {loaded.source}", loaded.load_s)
        self.n_layers, self.kv_heads, self.head_dim, self.context_len = model_shape(self.model)
        self.eos_ids = eos_ids(self.model, self.tok)
        self.n_params, self.weight_bytes = weight_counts(self.model)
        self.decoder = Decoder(cfg, self.device, self.split)
        self.quality = Quality(cfg, self.tok, self.device, self.context_len)
        self.control = LeverControl(
            cfg,
            self._emit,
            self.phases,
            self.decoder,
            self.model,
            dtype=self.dtype,
            n_layers=self.n_layers,
            context_len=self.context_len,
            draft=draft_model(cfg, self.tok, self.device, self.dtype, self.phases),
        )
        self.control.thinks = think_span(self.marker_spans) is not None
        self.routing, routing_note = Routing.of(self.model)
        self.ready = EngineReady(
            model=loaded.name,
            source=loaded.source,
            device=self.device,
            dtype=str(self.dtype).removeprefix("torch."),
            n_params=self.n_params,
            weight_bytes=self.weight_bytes,
            n_layers=self.n_layers,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            kv_bytes_per_elem=torch.tensor([], dtype=self.dtype).element_size(),
            context_len=self.context_len,
            load_s=loaded.load_s,
            threads=self.threads,
            quant_impl=lv.quant_impl(self.device, self.dtype),
            placement=self.placement if cfg.device_map else None,
            demo_leak=f"+{cfg.demo_leak_mb:g} MB/run ({cfg.demo_leak_kind})" if cfg.demo_leak_mb > 0 else "",
            experts=bandwidth.experts_text(self.model),
            thinks=self.control.thinks,
            routing=self.routing.shape() if self.routing else None,
            routing_note=routing_note,
            backend=devices.backend(self.device, torch),
        )
        freeze()
        if cfg.levers.quant == "off":  # the weights a first run reads: measured before the engine says it is ready (and idle)
            self.control.probe_if_due()
        self.emit(self.ready)
        for name in lever_rules.ORDER:
            if getattr(cfg.levers, name) != getattr(self.levers, name):
                self.set_lever(name, getattr(cfg.levers, name))
        return self.ready

    # ---------------------------------------------------------------- levers
    @property
    def levers(self) -> Levers:
        return self.control.levers

    def set_lever(self, name: str, value, run_id: int | None = None, segment: int = 0) -> bool:
        """Apply a lever (preparing it if needed); emits LeverChanged or LeverRefused."""
        return self.control.set_lever(name, value, run_id, segment)

    def request_probe(self) -> None:
        self.control.request_probe()

    def perplexity(self, level: str) -> float | None:
        return self.quality.perplexity(level, self.control.variants.get(level))

    # ---------------------------------------------------------------- prompts
    def prompt_ids(self, req: RunRequest) -> tuple[list[int], str]:
        return prompt_tokens(self.tok, req, self.context_len)

    # ---------------------------------------------------------------- commands
    def serve(self, commands) -> None:
        """Commands from the UI's queue until Shutdown; a run takes those sent meanwhile between its steps."""

        def poll() -> list[Command]:
            out = []
            while True:
                try:
                    out.append(commands.get_nowait())
                except queue.Empty:
                    return out

        while self.command(self.pending.pop(0) if self.pending else commands.get(), poll=poll):
            self.control.probe_if_due()

    def command(self, cmd: Command, run: RunState | None = None, poll: Callable[[], Iterable[Command]] = lambda: ()) -> bool:
        """Every command the engine takes, in one place: idle (`run` None; a Run starts one, polling
        `poll` between its steps), or between two steps of `run`, where a lever applies at once, a
        pause holds the run here and stop ends it. False: shut down."""
        match cmd, run:
            case SetLever(lever=name, value=value), None:
                self.set_lever(name, value)
            case SetLever(lever=name, value=value), RunState():
                self._lever_in_run(run, name, value)
            case Probe(), _:
                self.control.request_probe()
            case Confidence(on=on), _:
                self.decoder.confidence = on
            case History(path=path, runs=runs), _:
                self._record_history(path, runs, run)
            case Profile(path=path, steps=steps), _:
                self._request_anatomy(path, steps)
            case Run(request=req), None:
                self.run(req, poll)
            case Shutdown(), None:
                return False
            case Pause(), RunState(paused_at=None):
                run.paused_at = time.perf_counter()
                self.phases.start("pause", "paused")
            case Resume(), RunState(paused_at=float()):
                self.phases.done("pause", "resumed", time.perf_counter() - run.paused_at)
                run.paused_at = None
            case Stop() | Shutdown(), RunState():
                if isinstance(cmd, Shutdown):
                    self.pending.append(cmd)
                if run.paused_at is not None:
                    self.phases.done("pause", "stopped while paused", time.perf_counter() - run.paused_at)
                raise _Stop
            case Run(), RunState():
                self.pending.append(cmd)
        # Idle, Stop, Pause and Resume have nothing to act on; in a run a second Pause or Resume changes nothing.
        return True

    def _poll(self, run: RunState) -> None:
        """The commands sent since the last step; while paused, those that follow, until one resumes or stops."""
        cmds = list(run.poll())
        while cmds or run.paused_at is not None:
            if not cmds:
                time.sleep(0.02)
                cmds = list(run.poll())
                continue
            try:
                self.command(cmds.pop(0), run)
            except _Stop:
                self.pending.extend(c for c in cmds if not isinstance(c, (Pause, Resume, Stop)))
                raise

    def _lever_in_run(self, run: RunState, name: str, value) -> None:
        before = self.levers
        if not self.set_lever(name, value, run.run_id, run.segment + 1):
            return
        run.segment += 1
        after = self.levers
        # Weights, cache layout or batch changed: the cache must be rebuilt from the whole text.
        rebuild = (after.cache and not before.cache) or after.compile != before.compile or after.quant != before.quant or after.batch != before.batch
        # Speculation crops the cache; a sliding-window layer made without it cannot be (speculative.rollback_ready).
        rebuild = rebuild or (after.spec != before.spec and bool(sliding_layers(run.cache)))
        run.reprefill = run.reprefill or rebuild
        if not after.cache:
            run.cache = None

    # ---------------------------------------------------------------- a run
    @torch.inference_mode()
    def run(self, req: RunRequest, poll: Callable[[], Iterable[Command]] = lambda: ()) -> RunFinished | None:
        run = self._start(req, poll)
        if run is None:
            return None
        try:
            devices.reset_peak(self.device, torch)
            while run.remaining > 0 and self._step(run):
                pass
        except _Stop:
            run.stop_reason = "stopped"
        except torch.OutOfMemoryError:
            run.cache = None
            gc.collect()
            devices.empty_cache(self.device, torch)
            self.emit(EngineError(message="out of memory during generation; try a smaller batch, a shorter prompt or quantization"))
            run.stop_reason = "out of memory"
        except Exception as exc:  # noqa: BLE001 - one broken run is reported, the session goes on
            self.emit(EngineError(message=f"generation failed: {type(exc).__name__}: {str(exc)[:300]}"))
            run.stop_reason = "error"
        return self._finish(run)

    def _start(self, req: RunRequest, poll) -> RunState | None:
        try:
            ids, text = self.prompt_ids(req)
        except PromptError as exc:
            self.emit(EngineError(message=str(exc)))
            return None
        self._run_id += 1
        if self.cfg.temperature > 0:
            self.decoder.gen.manual_seed(self.cfg.seed)
        if self.levers.compile:
            self.control.prepare_compile(len(ids) + req.max_new_tokens)
        lev = self.levers
        preset = req.preset if req.prompt is None else "custom"
        started = RunStarted(run_id=self._run_id, levers=lev, prompt_tokens=len(ids), max_new_tokens=req.max_new_tokens, prompt_text=text, preset=preset)
        self.emit(started)
        # A step's interval runs from the previous emission (RunStarted's for the first) to its own,
        # less the phases (pause, compile, quantize) between: everything the loop does per token
        # counts, as a reader of the events sees it, and TTFT + the intervals = end-to-end.
        memory = MemoryWatch(self.device, self.emit, self.gpus)
        run = RunState(self._run_id, req, ids, [list(ids)], poll, memory, IncrementalDecoder(self.tok), started.t_ns, self.phases.ns, finished_rows=[False])
        run.phases = StepPhases(self.tok, self.marker_spans, ids)
        if self.routing is not None:
            self.routing.new_run()
        self._batch_to(run, lev.batch)
        return run

    def _batch_to(self, run: RunState, size: int) -> None:
        """The run's batch made `size`: distinct prompts batched with its own, or its own replicated."""
        if self.cfg.batch_prompts == "replicated":
            if size != len(run.tokens):  # every row a copy of row 0's text
                run.tokens = [list(run.tokens[0]) for _ in range(size)]
                run.finished_rows = [False] * size
        elif run.batch is not None and size > 1:
            run.batch.resize(size)
        elif size > 1:
            first = Sequence(0, run.tokens[0], len(run.prompt_ids), run.req.max_new_tokens)
            run.batch = ContinuousBatch(size, first, lambda n: self._arrival(run.req, n), self.eos_ids, run.req.ignore_eos, self.tok.pad_token_id or 0)
        else:
            run.batch = None

    def _arrival(self, req: RunRequest, number: int) -> tuple[list[int], int]:
        """The `number`th request to arrive in a run's batch: its prompt's ids and max new tokens."""
        prompts = batch_prompts()
        max_new = max(1, round(req.max_new_tokens * SHARES[(number - 1) % len(SHARES)]))
        ids, _ = prompt_tokens(self.tok, RunRequest(prompt=prompts[(number - 1) % len(prompts)], chat=req.chat, max_new_tokens=max_new), self.context_len)
        return ids, max_new

    def _step(self, run: RunState) -> bool:
        """One step at a token boundary: the commands sent meanwhile, then the step the levers ask
        for, its event. False: the run ends here."""
        self._poll(run)
        lev, model = self._prepare_step(run)
        if len(run.tokens[0]) >= self.context_len:
            run.stop_reason = "context full"
            return False
        remaining = run.remaining
        t0, phases_before = now_ns(), self.phases.ns
        self.decoder.routes = self.routing.begin(model) if self.routing is not None else None
        kind, new_rows, forward_ns, proposed, accepted = self._forward_step(run, lev, model, remaining)
        if self.routing is not None and self.decoder.routes:
            self.routing.settle(self.decoder.routed)
        if lev.think and run.phases is not None:  # the host's tokens, before the next step feeds them: no read of its own
            new_rows = run.phases.budgeted(new_rows, lev.think)
        new_rows = extend_rows(run.tokens, new_rows, remaining, run.finished_rows, self.eos_ids, run.req.ignore_eos)
        run.out_ids.extend(new_rows[0])
        compute_ns = now_ns() - t0 - (self.phases.ns - phases_before)  # less a recompile inside the step
        step = run.step_event(kind, new_rows[0], forward_ns, (proposed, accepted, self.decoder.rejected), compute_ns, self.phases.ns, self.decoder.last_p)
        if self.routing is not None and self.decoder.routes:
            step.experts_hit = self.routing.step_hits
        self.emit(step)
        if self.routing is not None and (load := self.routing.load(run.run_id)) is not None:
            self.emit(load)
        run.memory.tick(step.t_ns)
        if all(run.finished_rows):
            run.stop_reason = "eos"
            return False
        return True

    def _prepare_step(self, run: RunState) -> tuple[Levers, torch.nn.Module]:
        """What the levers set since the last step need first: the batch's sequences, the cache
        rebuilt, the compiled step, a read-rate measurement; the levers and weights this step runs."""
        lev = self.levers
        self._batch_to(run, lev.batch)
        if run.reprefill:
            run.need_prefill, run.reprefill = True, False
            if lev.compile:
                self.control.prepare_compile(len(run.tokens[0]) + run.remaining)
                lev = self.levers
        self.control.probe_if_due()  # asked for during the run: a phase of its own, outside the step's interval
        return lev, self.control.variants[lev.quant]

    def _forward_step(self, run: RunState, lev: Levers, model, remaining: int) -> tuple[str, list[list[int]], int, int, int]:
        """(kind, each row's new tokens, forward ns, proposed, accepted) of a prefill, a verify or a decode step."""
        first, run.first = run.first, False
        if run.need_prefill or not lev.cache:
            kind = "prefill" if first else ("reprefill" if run.need_prefill else "decode")
            run.need_prefill = False
            if lev.cache:
                run.cache = self.control.new_cache(model, len(run.tokens[0]) + remaining + 8)
            rows, forward_ns = run.batch.prefill(self.decoder, model, run.cache) if run.batch else self.decoder.prefill(model, run.tokens, run.cache)
            if self.control.draft is not None:
                self.control.draft.reset()
            return kind, rows, forward_ns, 0, 0
        if run.batch is None and (props := self.control.proposals(run.tokens[0], remaining)) is not None:
            rows, forward_ns, proposed, accepted = self.decoder.verify(model, run.tokens[0], run.cache, props)
            if lev.spec == "draft":
                self.control.draft.settle(accepted, proposed)
            return "verify", rows, forward_ns, proposed, accepted
        fn = self.control.compiled_fn(model, lev.quant) if lev.compile else None
        if self.anatomy is not None and self.anatomy.before_step(run.run_id, lev, model):
            self.anatomy = None
        if run.batch is not None:
            rows, forward_ns = run.batch.decode(self.decoder, model, run.cache, lambda: self.control.new_cache(model, 0))
        else:
            rows, forward_ns = self.decoder.decode(model, run.tokens, run.cache, fn)
        if self.anatomy is not None and self.anatomy.after_step(run.run_id):
            self.anatomy = None
        return "decode", rows, forward_ns, 0, 0

    def _request_anatomy(self, path: str, steps: int) -> None:
        reason = anatomy_refusal(self.levers, busy=self.anatomy is not None, device=self.device)
        if reason:
            self.emit(LeverRefused(lever="profile", value=f"{steps} steps", reason=reason))
            return
        self.anatomy = StepAnatomy(steps, path, self.decoder, self.phases, self._emit)

    def _finish(self, run: RunState) -> RunFinished:
        self.control.stop_trusting()
        if self.anatomy is not None and self.anatomy.end(run.run_id):  # the run ended inside the window
            self.anatomy = None
        lev = self.levers
        # A run whose levers changed midway is compared, but never becomes the reference.
        plain = lev.is_plain() and not run.segment and run.stop_reason in ("max tokens", "eos")
        if self.cfg.demo_leak_mb > 0:
            self._leak.append(demo_leak(self.device, int(self.cfg.demo_leak_mb * MB), self.cfg.demo_leak_kind))
        gc.collect()
        trim_heap()
        if self.routing is not None and (load := self.routing.load(run.run_id, end=True)) is not None:
            self.emit(load)
        torch_peak, gpu_base, gpu_reserved, gpu_proc = run.memory.after_run()
        answer_at = run.phases.answer_start(run.out_ids) if run.phases is not None else 0
        first_diff, note = self.quality.compare(run.prompt_ids, run.out_ids, run.req.ignore_eos, plain, answer_at, budgeted=bool(lev.think))
        ev = RunFinished(
            run_id=run.run_id,
            n_tokens=len(run.out_ids),
            stop_reason=run.stop_reason,
            text=run.text.text,
            peak_rss=run.memory.peak_rss,
            baseline_rss=rss_bytes(),
            torch_peak=torch_peak,
            gpu_baseline=gpu_base,
            perplexity=self.perplexity(lev.quant),
            first_diff=first_diff,
            diff_note=note,
            gpu_reserved=gpu_reserved,
            gpu_proc_mem=gpu_proc,
            expert_counts=self.routing.counts() if self.routing else None,
        )
        self.emit(ev)
        if self.history is not None and self.history.after_run():
            self.history = None
        return ev

    def _record_history(self, path: str, runs: int, run: RunState | None) -> None:
        """The allocator's history from now (the run in flight counts as the window's first) for `runs` runs."""
        reason = history_refusal(self.device) or ("it is recording already" if self.history is not None else None)
        if reason:
            self.emit(LeverRefused(lever="history", value=f"{runs} runs", reason=reason))
            return
        self.history = CudaHistory(path, runs, self._emit, run.run_id if run is not None else self._run_id + 1)
        self.history.start()
