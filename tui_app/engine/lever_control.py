"""The engine's levers: whether a value can apply now, applying it, and preparing what it needs
(a quantized weight variant, a compiled decode step, the draft model) as a phase of its own,
outside any run's timing.

`Engine.load` makes one LeverControl for the model it loaded, handing it the model, its device and
the Decoder it runs steps with; the engine asks it for the current levers and their weights.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace

import torch

from monitors.events import Bandwidth, LeverChanged, LeverRefused, Levers, Phase
from monitors.text import plural
from tui_app.engine import bandwidth, devices, lever_rules, native, pages
from tui_app.engine import levers as lv
from tui_app.engine.lean import use_own_attention
from tui_app.engine.models import ModelError, cache_kwarg, load_model, on_device, to_device
from tui_app.engine.speculative import DraftProposer, lookup_proposals, rollback_ready, sliding_layers

MB = 1024 * 1024
MAX_GEMV_ROWS = 2  # measured: see _stream_gemv_on_cpu
CACHE_BYTES = 32 * MB  # a last-level cache (this CPU's L3): weights beyond it stream from memory
SPLIT = "the model is placed over several devices (--device-map)"
SLIDING_BATCH = (
    "this model's sliding-window cache layers drop old tokens, so distinct prompts cannot share one padded cache; start with --batch-prompts replicated"
)


class Phases:
    """The preparation phases (load, quantize, compile, draft, a read-rate measurement, a pause) as
    events, and the time of every finished one: a run's step intervals leave out those inside it."""

    def __init__(self, emit):
        self.emit = emit
        self.ns = 0

    def start(self, name: str, detail: str) -> None:
        self.emit(Phase(name=name, detail=detail, done=False))

    def done(self, name: str, detail: str, seconds: float, cost_of: str = "", graph_breaks: int = 0) -> None:
        self.ns += round(seconds * 1e9)
        self.emit(Phase(name=name, detail=detail, done=True, seconds=seconds, cost_of=cost_of, graph_breaks=graph_breaks))


class LeverControl:
    def __init__(self, cfg, emit, phases: Phases, decoder, model, *, dtype, n_layers: int, context_len: int, draft: DraftProposer | None = None):
        self.cfg = cfg
        self.emit = emit
        self.phases = phases
        self.decoder = decoder
        self.model = model
        self.device, self.dtype, self.split = decoder.device, dtype, decoder.split
        self.n_layers, self.context_len = n_layers, context_len
        self.levers = Levers()
        self.variants: dict[str, torch.nn.Module] = {"off": model}
        self._compiled: dict[str, object] = {}
        self.warm: set[tuple] = set()
        self.trusting = False  # dynamo's stance: only differentiating guards (see compiled_fn)
        self.draft = draft
        self.probe_due = True  # the weights moved or changed: their read rate is to be measured again
        self.thinks = False  # the model's tokenizer has a think span's markers: a thinking budget can close it

    def sliding_window(self) -> bool:
        from transformers import DynamicCache

        return bool(sliding_layers(DynamicCache(config=self.model.config)))

    def request_probe(self) -> None:
        if self.split:
            self._refuse("probe", "mem bw", SPLIT)
            return
        self.probe_due = True

    def probe_if_due(self) -> None:
        """Measure the read of the current weights (bandwidth.py) where they changed or moved, or
        on request, as a phase of its own: outside any run's timing, and never inside another
        phase (whose seconds would then count it twice)."""
        if not self.probe_due or self.split:
            return
        self.probe_due = False
        t0 = time.perf_counter()
        model = self.variants[self.levers.quant]
        nbytes, rate = bandwidth.read_rate(model)
        weights = "fp" if self.levers.quant == "off" else self.levers.quant
        source = f"a read of the {weights} weights in place ({nbytes / 2**20:.1f} MiB), the best of {bandwidth.REPEATS}"
        self.emit(
            Bandwidth(
                quant=self.levers.quant,
                weight_bytes=bandwidth.weight_bytes(model),
                expert_bytes=bandwidth.expert_bytes(model),
                read_bytes=nbytes,
                read_bps=rate,
                source=source,
            )
        )
        self.phases.done("bandwidth", f"{source}: {rate / 1e9:.1f} GB/s", time.perf_counter() - t0)

    def _refuse(self, lever: str, value, reason: str) -> bool:
        self.emit(LeverRefused(lever=lever, value=value, reason=reason))
        return False

    def check_lever(self, name: str, value, levers: Levers | None = None) -> str | None:
        """The reason this lever value cannot be applied now, or None."""
        lev = levers or self.levers
        if self.split and (name in ("quant", "compile") or (name, value) == ("spec", "draft")) and value not in ("off", False):
            return f"{SPLIT}; this lever needs the whole model on one device"
        if why := devices.refusal(self.device, name, value, torch):
            return f"{value if name == 'quant' else name} on {self.device}: {why}"
        if why := lever_rules.refusal(name, value, lev, self.cfg.temperature, self.cfg.batch_prompts):
            return why
        if name == "quant" and value != "off":
            impl = lv.quant_impl(self.device, self.dtype)[value]
            if impl.startswith("refused"):
                return f"{value} on {self.device}: {impl.removeprefix('refused: ')}"
            return lv.quant_refusal(self.model, value, self.device) or None
        if name == "think" and value and not self.thinks:
            return "this model has no think span: its tokenizer has no <think> and </think> tokens"
        if name == "batch" and value != 1 and self.cfg.batch_prompts == "distinct" and self.sliding_window():
            return SLIDING_BATCH
        return None

    def set_lever(self, name: str, value, run_id: int | None = None, segment: int = 0) -> bool:
        """Apply a lever (preparing it if needed); emits LeverChanged or LeverRefused."""
        reason = self.check_lever(name, value)
        if reason:
            return self._refuse(name, value, reason)
        if getattr(self.levers, name) == value:
            return False
        try:
            if name == "quant" and value != "off":
                self.variant(value)
            if name == "spec" and value == "draft":
                self.draft_proposer()
        except lv.LeverError as exc:
            return self._refuse(name, value, str(exc))
        self.levers = replace(self.levers, **{name: value})
        self.probe_due = self.probe_due or name == "quant"
        self.emit(LeverChanged(run_id=run_id, lever=name, value=value, levers=self.levers, segment=segment))
        self.probe_if_due()
        return True

    def variant(self, level: str) -> torch.nn.Module:
        if level not in self.variants:
            t0 = time.perf_counter()
            self.phases.start("quantize", f"{level}: {lv.quant_impl(self.device, self.dtype)[level]}")
            self.variants[level] = lv.quantize(self.model, level, self.device, self.dtype)
            freeze()
            self.phases.done("quantize", lv.quant_note(level, self.device, self.variants[level]), time.perf_counter() - t0, f"quant:{level}")
        return self.variants[level]

    def draft_proposer(self) -> DraftProposer:
        if self.draft is None:
            draft = lv.self_draft(self.model, self.cfg.draft_layers)
            self.draft = DraftProposer(draft, self.device, lv.self_draft_label(draft, self.cfg.draft_layers, self.n_layers))
            self.emit(Phase(name="draft", detail=self.draft.label, done=True))
        return self.draft

    def proposals(self, row: list[int], remaining: int) -> torch.Tensor | None:
        """Tokens the spec lever proposes to verify in one step, on the device ([k]); None: a plain decode step."""
        spec = self.levers.spec
        if spec == "lookup":
            found = lookup_proposals(row, num_tokens=min(8, remaining - 1))
            return to_device(found, self.device) if found else None
        if spec == "draft" and remaining > 1:
            return self.draft_proposer().propose(row)[: remaining - 1]
        return None

    def new_cache(self, model, needed: int):
        """A KV cache for `needed` tokens: static (in buckets) for the compiled step, else dynamic."""
        from transformers import DynamicCache, StaticCache

        if self.levers.compile:
            return on_device(StaticCache(config=model.config, max_cache_len=self.static_len(needed)), self.device)
        cache = DynamicCache(config=model.config)
        return rollback_ready(cache) if self.levers.spec != "off" else cache

    # ---------------------------------------------------------------- compile
    def static_len(self, needed: int) -> int:
        # Buckets of 256 so compiled graphs (specialized on the cache shape) are reused across runs.
        return min(self.context_len, max(256, -(-needed // 256) * 256))

    def compiled_fn(self, model, level: str):
        """A compiled decode step (ids, static cache, position ids) → logits [B, 1, V]."""
        if level in self._compiled:
            return self._compiled[level]
        lean = self.decoder.lean_step(model)
        if lean is not None and lean.use_fused_step():  # built here, in the compile phase
            # A quantized Llama on CPU: its static-cache step is one C++ op (kernels/decode_step.cpp,
            # compiled ahead of time for this CPU by native.py), and torch.compile around that one op
            # only adds dynamo's and the C++ wrapper's handling of its 160 tensors: measured on the
            # default model's int4 step, 0.3-1 ms of a 4.5 ms step. So the op is the compiled step.
            self._compiled[level] = lean.static_step
            return lean.static_step
        mode = devices.compile_mode(self.device)
        if self.device == "cpu":
            import torch._inductor.config as inductor

            native.key_compiles_to_this_cpu()  # a cache made on another CPU gave wrong tokens

            # On CPU the per-step cost left is the generated wrapper calling each kernel from
            # Python; a C++ wrapper cuts it by a fifth (framework_overhead.py).
            inductor.cpp_wrapper = True
            weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
            _stream_gemv_on_cpu(inductor, on=weights > CACHE_BYTES)
            if level == "off" and weights > CACHE_BYTES:  # quantized variants' pools are there already
                pages.adopt(model)  # the step streams these weights: on huge pages (pages.py)
                self.probe_due = True
            # With the static cache's mask, transformers copies each grouped K/V head out to
            # every query head it serves before attention (1.2 MB per layer and token for the
            # default model's 3 KV heads), unless SDPA is told to group them itself: measured,
            # compiled fp32 39 -> 43 tok/s, int8 73 -> 85. Read when the step is traced.
            os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
        # Each weight variant × batch × cache bucket is its own graph of one step function;
        # past dynamo's default of 8 it would fall back to eager under the "compile" label.
        torch._dynamo.config.recompile_limit = 64
        if lean is not None:
            # Here, in the compile phase: the attention kernel's first build takes seconds.
            lean.own_attention = use_own_attention(model)
            step = lean.static_step
        else:
            cache_kw = cache_kwarg(type(model))

            def step(ids, cache, position_ids):
                return model(input_ids=ids, **{cache_kw: cache}, position_ids=position_ids, use_cache=True, logits_to_keep=1).logits

        # A sliding-window layer of transformers' static cache (Gemma 3's) keeps its length as a
        # Python int that the mask reads, so a graph specialized on it would be one graph per
        # position: there the changing int becomes a symbol after its first change.
        from transformers import StaticCache

        layers = [getattr(t, "is_sliding", False) for t in StaticCache(config=model.config, max_cache_len=1).layers]
        compiled = torch.compile(step, mode=mode, dynamic=None if any(layers) else False)
        # Which layer's length names the cache's bucket: a full-attention one (a sliding layer's
        # is the window's wherever the bucket is longer), or any where all of them slide alike.
        full = layers.index(False) if False in layers else 0

        def call(ids, cache, position_ids):
            # Once this shape is warm (_warm_compile ran it), dynamo's guards only pick among
            # graphs the engine itself compiled: checking all of them (every parameter, every
            # cache attribute) cost 30 us a step, a sixth of the tiny Llama's compiled step.
            # A shape not yet warm takes the full check, so a new shape still recompiles.
            # The stance is process-wide; it is switched only when it changes (a context
            # manager per step cost a third of the gain), and back at each run's end.
            key = (level, ids.shape[0], cache.layers[full].max_cache_len)
            trusted = key in self.warm
            if trusted != self.trusting:
                torch.compiler.set_stance("default", skip_guard_eval_unsafe=trusted)
                self.trusting = trusted
            try:
                return compiled(ids, cache, position_ids)
            except RuntimeError as exc:
                if not trusted or "skip_guard_eval_unsafe" not in str(exc):
                    raise
            # A state the warm-up did not reach (a sliding window filling up): this shape's guards
            # are checked from now on, and its new graph is compiled as a phase of its own.
            self.warm.discard(key)
            self.stop_trusting()
            t0, breaks = time.perf_counter(), graph_breaks()
            self.phases.start("compile", f"recompiling the decode step at a state the warm-up did not reach ({level}, batch {ids.shape[0]})")
            logits = compiled(ids, cache, position_ids)
            n = graph_breaks() - breaks
            self.phases.done("compile", f"batch {ids.shape[0]}, {level}: recompiled", time.perf_counter() - t0, f"recompile:{level}", n)
            return logits

        self._compiled[level] = call
        return call

    def stop_trusting(self) -> None:
        if self.trusting:  # the stance is process-wide: no other compiled code may inherit it
            torch.compiler.set_stance("default")
            self.trusting = False

    def warm_compile(self, batch: int, max_len: int) -> None:
        """Compile (and run once) outside any run, so compile time is its own phase."""
        key = (self.levers.quant, batch, max_len)
        if key in self.warm:
            return
        from transformers import StaticCache

        model = self.variants[self.levers.quant]
        first = not any(k[0] == key[0] for k in self.warm)  # later shapes reuse much of the first's work
        slow = "; a first compile takes a minute or more" if first else ""
        self.phases.start("compile", f"compiling the decode step (static cache {max_len}, batch {batch}, {self.levers.quant}){slow}")
        t0, breaks = time.perf_counter(), graph_breaks()
        fn = self.compiled_fn(model, self.levers.quant)
        cache = on_device(StaticCache(config=model.config, max_cache_len=max_len), self.device)
        tok = torch.zeros((batch, 1), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self.decoder.forward(model, tok, cache, 0)  # eager first write, as a real prefill does
            for pos in (1, 2, 3):  # reduce-overhead records its CUDA graph on a later call
                self.decoder.forward(model, tok, cache, pos, fn=fn)
        self.warm.add(key)
        freeze()
        how = "one C++ op (decode_step)" if getattr(self.decoder.lean_step(model), "fused", None) is not None else "torch.compile"
        n = graph_breaks() - breaks
        said = f", {plural(n, 'graph break')}" if n else ""
        self.phases.done("compile", f"batch {batch}, {self.levers.quant}: {how}{said}", time.perf_counter() - t0, f"compile:{self.levers.quant}", n)
        self.probe_if_due()  # the fp weights moved onto huge pages (pages.adopt)

    def prepare_compile(self, needed: int) -> None:
        """Compile for this shape now (its own phase); if inductor fails, the run goes on uncompiled."""
        try:
            self.warm_compile(self.levers.batch, self.static_len(needed))
        except Exception as exc:  # noqa: BLE001 - inductor failures vary; the run goes on uncompiled
            self._compiled.pop(self.levers.quant, None)
            self.levers = replace(self.levers, compile=False)
            self.emit(LeverRefused(lever="compile", value=True, reason=f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}"))


def draft_model(cfg, tok, device: str, dtype, phases: Phases) -> DraftProposer | None:
    """--draft-model's proposer, loaded beside the target (ModelError: it cannot be, or does not
    share the target's vocabulary); None: the self-draft, made when first asked for."""
    if not cfg.draft_model:
        return None
    draft = load_model(cfg.draft_model, device, dtype, progress=lambda m: phases.start("load", f"draft: {m}"), option="--draft-model")
    if draft.tokenizer.get_vocab() != tok.get_vocab():
        raise ModelError(f"--draft-model {cfg.draft_model}: its tokenizer differs from the target's; a draft must share the vocabulary")
    return DraftProposer(draft.model, device, f"draft {draft.name}")


def _stream_gemv_on_cpu(inductor, on: bool) -> None:
    """Have inductor write a decode step's matrix-vector products as its own fused reductions.

    MKL's GEMV streams a weight matrix from memory at 11 GB/s on this CPU where a plain read runs
    at 27-29 (benchmarks/engine/ceiling.py); inductor's reduction over the same weights runs at ~20, so
    the compiled fp32 step goes from 18 to 37 tok/s with the same greedy tokens. Inductor has this
    rewrite (its mem-bound mm pass) but only for tiny matrices on CPU; the limits below open it to
    every layer and the LM head, for up to MAX_GEMV_ROWS rows (the batch of a decode step): at
    batch 2 the reduction does 40 tok/s where MKL's GEMM does 23, at 4 they tie, at 8 MKL wins.
    Only for weights that do not fit in the cache (`on`): from cache MKL is the faster, and on the
    tiny Llama of framework_overhead.py the rewrite cost 0.17 -> 0.22 ms per token.
    The pass reads its limits when its module is imported, so they are set on the module too.
    """
    options = {k: v for k, v in inductor.post_grad_fusion_options.items() if k != "decompose_mm_pass"}
    if on:
        limits = {"cpu_max_first_dimension_decomposition": MAX_GEMV_ROWS, "cpu_max_other_dimension_decomposition": 1 << 20}
        options["decompose_mm_pass"] = limits
        from torch._inductor.fx_passes import decompose_mem_bound_mm

        for name, value in limits.items():
            setattr(decompose_mem_bound_mm, name, value)
    inductor.post_grad_fusion_options = options


def graph_breaks() -> int:
    """Dynamo's count of graph breaks in this process so far (its counters, by reason)."""
    return sum(torch._dynamo.utils.counters["graph_break"].values())


def freeze() -> None:
    """Move what exists now (weights, compiled graphs) out of every later collection.

    These objects live as long as the engine; without this the full gc.collect() before each
    baseline scans them all: ~190 ms per run for the default model, measured.
    """
    gc.collect()
    gc.freeze()
