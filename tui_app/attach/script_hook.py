"""Inside a script tokentop watches (`tokentop -- python script.py`): each `generate()` of a
transformers model becomes a run of tokentop's events (monitors/events.py), sent as JSON lines to
the socket tokentop named. attach/child/sitecustomize.py loads this before the first line of the
script and of every Python process it starts; the script is not changed, and runs as it would alone.

What a call is seen through, all public transformers API:
- generate's own `streamer` argument: ours (a tee with the script's streamer, if it passed one)
  stamps each token as generate hands it over, on the perf counter, in the generating thread;
- a forward pre-hook on the model for the call's cache object, from which the KV bytes are read;
- outside generate(), a hand-written loop's forwards (attach/script_loop.py), through hooks on every model that can
  generate, registered as the model is made (`PreTrainedModel.post_init` wrapped);
- the latest tokenizer made (its `__init__` wrapped), copied for this hook's own use, so that
  detokenizing here never touches an object the script is using at the same moment.
Beam search streams no tokens (transformers refuses a streamer there): its steps are its forwards,
each stamped as the next begins (the beams' tokens are chosen only at the end), and the best
sequence's text comes with the last.

Generation never waits on tokentop: a token's stamp goes into a bounded queue, and a thread of this
hook's own (attach/hook_writer.py) detokenizes, measures and sends; a slow or gone reader holds up
that thread alone. A process forked from a watched one gets a writer (and a connection) of its own.
"""

from __future__ import annotations

import atexit
import copy
import functools
import importlib.abc
import importlib.util
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from monitors import routing_hooks
from monitors.events import EngineReady, ExpertLoad, Levers, RunFinished, RunStarted, Step, now_ns
from monitors.kvcache import measure_cache, model_shape
from monitors.phases import ANSWER, StepPhases, marker_spans
from monitors.text import IncrementalDecoder
from tui_app.attach.hook_writer import Writer
from tui_app.attach.script_loop import Loop

PATCHES: dict[str, Callable] = {}  # module name → what to do to it once imported


class Call:
    """One generate() call, seen as a run: stamped in the generating thread, turned into events in the writer's."""

    def __init__(self, hook: Hook, model, run_id: int, kwargs: dict):
        self.hook, self.run_id, self.model = hook, run_id, model
        hook.flush_at_exit()
        self.text = IncrementalDecoder(hook.tokenizer_for(kwargs.get("tokenizer")))
        self.cache = None
        self.prompt: list[int] | None = None  # the writer's
        self.first = True  # the generating thread's: the first put is the prompt
        self.n = 0
        self.steps = 0
        config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        self.max_new = kwargs.get("max_new_tokens") or getattr(config, "max_new_tokens", None) or 0
        self.beams = kwargs.get("num_beams") or getattr(config, "num_beams", 1) or 1
        self.rows = 1  # the cache's: a beam search's first forward says how many
        spec = "draft" if kwargs.get("assistant_model") is not None else "lookup" if kwargs.get("prompt_lookup_num_tokens") else "off"
        self.spec = spec
        self.cached = kwargs.get("use_cache", getattr(config, "use_cache", True)) is not False
        self.cache_note = "" if self.cached else "generate(use_cache=False) recomputes the whole context each step"
        self.t0 = self.last = now_ns()
        self.phases: StepPhases | None = None  # the writer's: a reasoning model's phases, once the prompt is known

    # ---------------------------------------------------------------- in the generating thread
    def put(self, value) -> None:
        t = now_ns()
        rows = value.tolist() if hasattr(value, "tolist") else value
        row = rows[0] if rows and isinstance(rows[0], list) else rows
        self.hook.writer.put(self.started if self.first else self.tokens, t, list(row), len(rows))
        self.first = False

    def end(self) -> None:
        pass

    def on_forward(self, module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers 5.2x's name, and 4.x's
        if cache is not None:
            self.cache = cache
        if self.beams > 1:  # no streamer: a step a forward, the one before ending as this one begins
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.rows = ids.shape[0] if getattr(ids, "ndim", 0) == 2 else self.rows
            self.hook.writer.put(self.started if self.first else self.tokens, now_ns(), ids[0] if self.first and ids is not None else [], self.rows)
            self.first = False

    # ---------------------------------------------------------------- in the writer's thread
    def started(self, t: int, ids, batch: int) -> list:
        ids = ids.tolist() if hasattr(ids, "tolist") else ids  # a loop's tensor is read here, off its thread
        self.prompt = ids
        tok = self.text.tok
        self.phases = StepPhases(tok, marker_spans(tok), ids) if tok is not None else None
        ready = self.hook.ready(self.model)
        levers = Levers(cache=self.cached, compile=_compiled(self.model), quant=_quantized(self.model), spec=self.spec, batch=batch)
        text = self.text.tok.decode(ids, skip_special_tokens=True) if self.text.tok is not None else ""
        run = RunStarted(
            run_id=self.run_id,
            levers=levers,
            prompt_tokens=len(ids),
            max_new_tokens=self.max_new,
            prompt_text=text,
            preset="script",
            cache_note=self.cache_note,
            t_ns=self.t0,
        )
        return [*ready, run]

    def tokens(self, t: int, ids, batch: int) -> list:
        ids = ids.tolist() if hasattr(ids, "tolist") else ids
        self.steps += 1
        made = len(ids) if self.beams == 1 else 1  # a beam search's step: one token more in every beam
        self.n += made
        delta = self.text.push(ids) if self.text.tok is not None else ""
        kv = measure_cache(self.cache, len(self.prompt or ()) + self.n - 1)
        if not getattr(self.cache, "is_compileable", True):  # a dynamic cache, read here after it grew on: it held what it used
            kv.alloc_bytes = kv.used_bytes
        dt, self.last = t - self.last, t
        kind = "prefill" if self.steps == 1 else "decode"
        return [
            Step(
                run_id=self.run_id,
                step=self.steps,
                kind=kind,
                token_ids=ids,
                text=delta,
                n_tokens=made,
                t_ns=t,
                dt_ns=dt,
                forward_ns=0,
                kv_bytes=kv.used_bytes,
                kv_alloc_bytes=kv.alloc_bytes,
                seq_len=kv.seq_len,
                phase=self.phases.of(delta, made) if self.phases is not None else ANSWER,
            )
        ]

    def finished(self, t: int, reason: str, out_tokens: int | None, routed=None) -> list:
        events = [] if self.prompt is not None else self.started(t, [], 1)
        # An MoE's routing over the call, read here, off the generating thread: its one read a run
        counts = [b.tolist()[:-1] for b in routed] if routed else None
        n = self.n if self.steps else out_tokens or 0
        if reason == "done":
            reason = "max tokens" if self.max_new and n >= self.max_new else "eos"
        rss = _rss()
        fin = RunFinished(
            run_id=self.run_id,
            n_tokens=n,
            stop_reason=reason,
            text=self.text.text,
            peak_rss=_peak_rss(),
            baseline_rss=rss,
            torch_peak=None,
            gpu_baseline=None,
            perplexity=None,
            first_diff=None,
            diff_note=f"watched: its own code's run{f', beam search of {self.beams} (its tok/s counts every beam)' if self.beams > 1 else ''}",
            t_ns=t,
            expert_counts=counts,
        )
        load = [ExpertLoad(run_id=self.run_id, steps=self.steps, counts=counts, t_ns=t)] if counts else []
        return [*events, *load, fin]


class Tee:
    """generate's streamer: ours, and the script's own after it."""

    def __init__(self, call: Call, theirs):
        self.call, self.theirs = call, theirs

    def put(self, value) -> None:
        self.call.put(value)
        if self.theirs is not None:
            self.theirs.put(value)

    def end(self) -> None:
        if self.theirs is not None:
            self.theirs.end()


class Hook:
    def __init__(self, writer: Writer):
        self.writer = writer
        self.runs = itertools.count(1)
        self.seen: weakref.WeakSet = weakref.WeakSet()  # models whose EngineReady was sent
        # model → its MoE's counts (hooked at its first generate) and their shape, or why none
        self.routings: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.latest: weakref.ref | None = None  # the tokenizer made last
        self.copied: tuple = (None, None)  # (a weak reference to a tokenizer, this hook's copy of it)
        self.local = threading.local()
        self.loop = Loop(self, Call)
        self.exits = False  # flush_at_exit done in this process

    def close(self) -> None:
        self.loop.end(now_ns())
        self.writer.close()

    def forked(self) -> None:
        """In a process forked from this one: the writer's thread stayed behind, and the socket is the
        parent's; a writer of its own, and the model told again on its own connection. A loop's run
        the parent had open is the parent's (the models' hooks call this same Loop)."""
        self.writer = Writer(self.writer.path)
        self.writer.start()
        self.seen = weakref.WeakSet()
        self.loop.call = self.loop.pending = None
        self.exits = False

    def flush_at_exit(self) -> None:
        """At a process's first call: a multiprocessing worker ends in os._exit, past atexit, and
        its exit finalizers (taken out of the parent's at its start) are what send what is left."""
        mp = sys.modules.get("multiprocessing.util")
        if mp is not None and not self.exits:
            self.exits = True
            mp.Finalize(None, self.close, exitpriority=0)

    def tokenizer_for(self, given):
        tok = given if given is not None else self.latest() if self.latest is not None else None
        if tok is None:
            return None
        ref, private = self.copied
        if ref is None or ref() is not tok:
            private = _private(tok)
            self.copied = weakref.ref(tok), private
        return private

    def ready(self, model) -> list:
        if model in self.seen:
            return []
        self.seen.add(model)
        return [_engine_ready(model, *self.routings.get(model, ([], None, ""))[1:])]

    def counts(self, model) -> list:
        """An MoE's count tensors, zeroed for a call (forwards outside generate count into nothing read)."""
        if model not in self.routings:
            try:
                modules, shape, why = routing_hooks.find(model)
                buffers = routing_hooks.hook_counts(modules, shape["experts"], sys.modules["torch"]) if shape else []
            except Exception as exc:  # noqa: BLE001 - the script's generate goes on, its routing not counted
                buffers, shape, why = [], None, f"its routing is not counted: {type(exc).__name__}: {exc}"
            self.routings[model] = (buffers, shape, why)
        buffers = self.routings[model][0]
        for b in buffers:
            b.zero_()
        return buffers

    def generate(self, original, model, *args, **kwargs):
        if getattr(self.local, "inside", False):  # a generate within ours (a model's own override calling up)
            return original(model, *args, **kwargs)
        self.loop.end(now_ns())
        call = Call(self, model, next(self.runs), kwargs)
        counts = self.counts(model)
        streams = call.beams == 1
        if streams:
            kwargs["streamer"] = Tee(call, kwargs.get("streamer"))
        handle = model.register_forward_pre_hook(call.on_forward, with_kwargs=True)
        self.local.inside = True
        reason, out = "done", None
        try:
            out = original(model, *args, **kwargs)
            return out
        except KeyboardInterrupt:
            reason = "stopped"
            raise
        except BaseException as exc:
            reason = f"error: {type(exc).__name__}"
            raise
        finally:
            self.local.inside = False
            handle.remove()
            t = now_ns()
            best = None if streams or out is None else _new_tokens(out, kwargs, args)
            if best is not None and not call.first:  # the last forward's step, with the best sequence's tokens
                self.writer.put(call.tokens, t, best, call.rows)
            self.finish(call, t, reason, None if best is None else len(best), counts if not reason.startswith("error") else [])

    def finish(self, call, t: int, reason: str, out_tokens: int | None, counts: list) -> None:
        """The call's end to the writer, with copies of its routing counts, each on its count's own
        device (a model split over devices): the writer's thread reads them while the next run's first
        forward counts anew."""
        self.writer.put(call.finished, t, reason, out_tokens, [b.clone() for b in counts])


def _new_tokens(out, kwargs, args) -> list[int] | None:
    """The first returned sequence's new tokens (a beam search's best)."""
    seqs = getattr(out, "sequences", out)
    prompt = kwargs.get("input_ids", args[0] if args else kwargs.get("inputs"))
    if getattr(seqs, "ndim", 0) != 2 or not hasattr(prompt, "shape"):
        return None
    return seqs[0, prompt.shape[-1] :].tolist()


def _compiled(model) -> bool:
    """Whether the script compiled the model (`torch.compile(model)`, or its forward)."""
    return hasattr(model, "_orig_mod") or hasattr(model.forward, "_torchdynamo_orig_callable")


def _quantized(model) -> str:
    """The script's quantization, as transformers loaded it (its quantization_config): "off" for none."""
    qc = getattr(model.config, "quantization_config", None) if getattr(model, "hf_quantizer", None) else None
    if qc is None:
        return "off"
    method = getattr(qc, "quant_method", "quantized")
    kind = getattr(qc, "quant_type", None)
    kind = kind if isinstance(kind, str) or kind is None else type(kind).__name__.removesuffix("Config")
    bits = getattr(qc, "bits", None)
    bits = "int8" if getattr(qc, "load_in_8bit", False) else "4bit" if getattr(qc, "load_in_4bit", False) else f"int{bits}" if bits else None
    return ":".join(str(x) for x in (getattr(method, "value", method), kind or bits) if x)


def _private(tok):
    """A copy of the tokenizer for this hook's thread: a Rust tokenizer's decode borrows it, and
    the script encoding with it at that moment would get "Already borrowed"."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        from tokenizers import Tokenizer

        return Tokenizer.from_str(backend.to_str())
    return copy.deepcopy(tok)


def _engine_ready(model, routing: dict | None = None, routing_note: str = "") -> EngineReady:
    torch = sys.modules["torch"]  # the script's own, which its model was made with
    cfg = model.config
    n_layers, kv_heads, head_dim, context_len = model_shape(model)
    params = list(model.parameters())
    dtype = getattr(model, "dtype", None) or params[0].dtype
    moe = routing_hooks.config_experts(model)
    return EngineReady(
        model=getattr(cfg, "_name_or_path", "") or type(model).__name__,
        source=f"the script {os.path.basename(sys.argv[0] or 'python')} (pid {os.getpid()})",
        device=str(getattr(model, "device", "cpu")),
        dtype=str(dtype).removeprefix("torch."),
        n_params=sum(p.numel() for p in params),
        weight_bytes=sum(p.numel() * p.element_size() for p in params),
        n_layers=n_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_bytes_per_elem=dtype.itemsize,
        context_len=context_len,
        load_s=0.0,
        threads=torch.get_num_threads(),
        experts=f"{moe[0]} experts, {moe[1]} a token" if moe else "",
        routing=routing,
        routing_note=routing_note,
    )


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _peak_rss() -> int | None:
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


# -------------------------------------------------------------------- hooking transformers in
class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module the moment it has been imported (PATCHES), whoever imports it."""

    def find_spec(self, name, path, target=None):
        patch = PATCHES.pop(name, None)
        if patch is None:
            return None
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(path: str) -> Hook:
    hook = Hook(Writer(Path(path)))

    def on_generation(module) -> None:
        mixin = module.GenerationMixin
        original = mixin.generate

        @functools.wraps(original)
        def generate(self, *args, **kwargs):
            return hook.generate(original, self, *args, **kwargs)

        mixin.generate = generate

    def on_tokenizers(module) -> None:
        base = module.PreTrainedTokenizerBase
        original = base.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            hook.latest = weakref.ref(self)

        base.__init__ = __init__

    def on_models(module) -> None:
        base = module.PreTrainedModel
        original = base.post_init

        @functools.wraps(original)
        def post_init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if type(self).can_generate():  # the whole model, not its inner stack (which runs post_init too)
                self.register_forward_pre_hook(hook.loop.pre, with_kwargs=True)
                self.register_forward_hook(hook.loop.post, with_kwargs=True)

        base.post_init = post_init

    PATCHES["transformers.generation.utils"] = on_generation
    PATCHES["transformers.tokenization_utils_base"] = on_tokenizers
    PATCHES["transformers.modeling_utils"] = on_models
    sys.meta_path.insert(0, _AfterImport())
    hook.writer.start()
    atexit.register(hook.close)
    os.register_at_fork(after_in_child=hook.forked)
    return hook
