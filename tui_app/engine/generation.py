"""The generation engine: a prefill/decode loop that emits an event per step and applies levers
at token boundaries, continuing the same text.

Why our own loop and not `model.generate`: generate() hides its steps (no per-step timing, no
cache object to measure) and cannot change cache type, weights or speculation mid-run. The loop
does one device→host transfer per step (the new token ids), where generate() does about three.
"""

from __future__ import annotations

import gc
import math
import os
import time
from dataclasses import replace

import torch

from monitors.events import (
    BATCH_SIZES,
    QUANT_LEVELS,
    SPEC_MODES,
    EngineError,
    EngineReady,
    Levers,
    LeverChanged,
    LeverRefused,
    Phase,
    RunFinished,
    RunStarted,
    Step,
    now_ns,
)
from monitors.kvcache import measure_cache
from monitors.system import rss_bytes, trim_heap
from monitors.torch_memory import read_torch_memory
from tui_app.engine import levers as lv
from tui_app.engine import pages
from tui_app.engine.config import EngineConfig, RunRequest
from tui_app.engine.lean import LeanDecode, use_own_attention
from tui_app.engine.models import ModelError, load_model, resolve_device, resolve_dtype
from tui_app.engine.prompts import preset_prompt, reference_text
from tui_app.engine.speculative import DraftProposer, accept_greedy, lookup_proposals

MB = 1024 * 1024
MAX_GEMV_ROWS = 2  # measured: see _stream_gemv_on_cpu
CACHE_BYTES = 32 * MB  # a last-level cache (this CPU's L3): weights beyond it stream from memory


class PromptError(ValueError):
    """Bad prompt or length settings; the message says what to do."""


class _Stop(Exception):
    pass


def _default_threads() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


class Engine:
    def __init__(self, config: EngineConfig, emit):
        self.cfg = config
        self.emit = emit
        self.levers = config.levers
        self.pending: list[tuple] = []
        self._variants: dict[str, torch.nn.Module] = {}
        self._compiled: dict[str, object] = {}
        self._lean: dict[int, LeanDecode | None] = {}  # per weight variant (id of the module)
        self._warm: set[tuple] = set()
        self._trusting = False  # dynamo's stance: only differentiating guards (see _compiled_fn)
        self._ppl: dict[str, float] = {}
        self._reference: dict[tuple, list[int]] = {}
        self._draft: DraftProposer | None = None
        self._leak: list[bytearray] = []
        self._run_id = 0

    # ---------------------------------------------------------------- loading
    def load(self) -> EngineReady:
        cfg = self.cfg
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        self._gen = torch.Generator(self.device)  # sampling stays on the device: no sync for the draw
        self.threads = cfg.threads or _default_threads()
        if self.device == "cpu":
            torch.set_num_threads(self.threads)
        self.emit(Phase("load", f"loading {cfg.model}", False))
        loaded = load_model(cfg.model, self.device, self.dtype, progress=lambda m: self.emit(Phase("load", m, False)))
        self.model, self.tok, self.model_name = loaded.model, loaded.tokenizer, loaded.name
        self.model.generation_config.pad_token_id = self.tok.pad_token_id or self.tok.eos_token_id
        from transformers import DynamicCache

        self._dynamic_cache = DynamicCache
        self._variants["off"] = self.model
        self.emit(Phase("load", f"{loaded.name} from {loaded.source}", True, loaded.load_s))
        c = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        self.n_layers = int(getattr(c, "num_hidden_layers", None) or getattr(c, "n_layer"))
        n_heads = int(getattr(c, "num_attention_heads", None) or getattr(c, "n_head"))
        self.kv_heads = int(getattr(c, "num_key_value_heads", None) or n_heads)
        hidden = int(getattr(c, "hidden_size", None) or getattr(c, "n_embd"))
        self.head_dim = int(getattr(c, "head_dim", None) or hidden // n_heads)
        self.context_len = int(getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", 2048))
        self.eos_ids = self._eos_ids()
        params = list(self.model.parameters())
        seen = {p.data_ptr(): p for p in params}  # tied weights counted once
        self.n_params = sum(p.numel() for p in seen.values())
        self.weight_bytes = sum(p.numel() * p.element_size() for p in seen.values())
        if cfg.draft_model:
            draft = load_model(cfg.draft_model, self.device, self.dtype, progress=lambda m: self.emit(Phase("load", f"draft: {m}", False)))
            if draft.tokenizer.get_vocab() != self.tok.get_vocab():
                raise ModelError(f"--draft-model {cfg.draft_model}: its tokenizer differs from the target's; a draft must share the vocabulary")
            self._draft = DraftProposer(draft.model, self.device, f"draft {draft.name}")
        ready = EngineReady(
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
        )
        self.ready = ready
        _freeze()
        self.emit(ready)
        initial, self.levers = self.levers, Levers()
        for name in ("quant", "compile", "cache", "spec", "batch"):
            if getattr(initial, name) != getattr(self.levers, name):
                self.set_lever(name, getattr(initial, name))
        return ready

    def _eos_ids(self) -> set[int]:
        ids = set()
        for src in (self.model.generation_config.eos_token_id, self.tok.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(src)
        return ids

    # ---------------------------------------------------------------- levers
    def _refuse(self, lever: str, value, reason: str) -> bool:
        self.emit(LeverRefused(lever, value, reason))
        return False

    def check_lever(self, name: str, value, levers: Levers | None = None) -> str | None:
        """The reason this lever value cannot be applied now, or None."""
        lev = levers or self.levers
        if name == "quant":
            if value not in QUANT_LEVELS:
                return f"quantization must be one of {', '.join(QUANT_LEVELS)}"
            if value != "off":
                impl = lv.quant_impl(self.device, self.dtype)[value]
                if impl.startswith("refused"):
                    return f"{value} on {self.device}: {impl.removeprefix('refused: ')}"
                if not lv.has_linear_layers(self.model):
                    return f"{value}: this model has no nn.Linear layers to quantize (GPT-2 style Conv1D)"
        elif name == "spec":
            if value not in SPEC_MODES:
                return f"speculative mode must be one of {', '.join(SPEC_MODES)}"
            if value != "off":
                if self.cfg.temperature > 0:
                    return "speculative decoding here verifies greedily; it needs --temperature 0"
                if lev.batch != 1:
                    return "speculative decoding verifies one sequence; set batch size 1 first"
                if not lev.cache:
                    return "speculative verification needs the KV cache; turn the cache on first"
                if lev.compile:
                    return "verify steps are multi-token and the compiled graph is single-token; turn compile off first"
        elif name == "cache":
            if not value and lev.spec != "off":
                return "speculative decoding needs the KV cache; turn speculation off first"
            if not value and lev.compile:
                return "compile runs on a static KV cache; turn compile off first"
        elif name == "compile":
            if value and not lev.cache:
                return "compile needs the (static) KV cache; turn the cache on first"
            if value and lev.spec != "off":
                return "verify steps are multi-token and the compiled graph is single-token; turn speculation off first"
        elif name == "batch":
            if value not in BATCH_SIZES:
                return f"batch size must be one of {', '.join(map(str, BATCH_SIZES))}"
            if value != 1 and lev.spec != "off":
                return "speculative decoding verifies one sequence; turn speculation off first"
        else:
            return f"unknown lever {name!r}"
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
                self._variant(value)
            if name == "spec" and value == "draft":
                self._draft_proposer()
        except lv.LeverError as exc:
            return self._refuse(name, value, str(exc))
        self.levers = replace(self.levers, **{name: value})
        self.emit(LeverChanged(run_id, name, value, self.levers, segment))
        return True

    def _variant(self, level: str) -> torch.nn.Module:
        if level not in self._variants:
            t0 = time.perf_counter()
            self.emit(Phase("quantize", f"{level}: {lv.quant_impl(self.device, self.dtype)[level]}", False))
            self._variants[level] = lv.quantize(self.model, level, self.device, self.dtype)
            _freeze()
            self.emit(Phase("quantize", lv.quant_note(level, self.device, self._variants[level]), True, time.perf_counter() - t0))
        return self._variants[level]

    def _draft_proposer(self) -> DraftProposer:
        if self._draft is None:
            n = self.cfg.draft_layers
            self._draft = DraftProposer(lv.self_draft(self.model, n), self.device, f"self-draft: first {n} of {self.n_layers} layers")
            self.emit(Phase("draft", self._draft.label, True))
        return self._draft

    # ---------------------------------------------------------------- prompts
    def prompt_ids(self, req: RunRequest) -> tuple[list[int], str]:
        if req.max_new_tokens <= 0:
            raise PromptError(f"max new tokens must be at least 1 (got {req.max_new_tokens})")
        if req.max_new_tokens >= self.context_len:
            raise PromptError(f"max new tokens {req.max_new_tokens} does not fit the model's context of {self.context_len} tokens")
        if req.prompt_ids is not None:
            ids, text = list(req.prompt_ids), self.tok.decode(req.prompt_ids)
        else:
            try:
                text = req.prompt if req.prompt is not None else preset_prompt(req.preset, req.prompt_file)
            except ValueError as exc:
                raise PromptError(str(exc)) from None
            if not text.strip():
                raise PromptError("the prompt is empty; type some text or choose a preset")
            if req.chat and getattr(self.tok, "chat_template", None):
                enc = self.tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
                ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
            else:
                ids = self.tok(text)["input_ids"]
        if not ids:
            raise PromptError("the prompt tokenized to nothing")
        room = self.context_len - req.max_new_tokens
        if len(ids) > room:
            if not req.truncate:
                raise PromptError(
                    f"the prompt is {len(ids)} tokens and {req.max_new_tokens} new tokens are asked for, "
                    f"but the model's context is {self.context_len}; shorten it, ask for fewer tokens, or pass --truncate left"
                )
            ids = ids[-room:]
        return ids, text

    # ---------------------------------------------------------------- generation
    def _forward(self, model, ids: torch.Tensor, cache, pos: int, keep: int = 1, fn=None) -> torch.Tensor:
        n = ids.shape[1]
        if n == 1:  # the cheapest way to a [B, 1] tensor; it is the compiled step's input (measured)
            position_ids = torch.full((ids.shape[0], 1), pos, device=ids.device)
        else:
            position_ids = torch.arange(pos, pos + n, device=ids.device).unsqueeze(0).expand(ids.shape[0], -1)
        if fn is not None:  # a compiled decode step
            return fn(ids, cache, position_ids)
        if n == 1 and isinstance(cache, self._dynamic_cache) and (lean := self._lean_step(model)) is not None:
            return lean(ids, cache, position_ids)
        out = model(input_ids=ids, past_key_values=cache, position_ids=position_ids, use_cache=cache is not None, logits_to_keep=keep)
        return out.logits

    def _lean_step(self, model) -> LeanDecode | None:
        key = id(model)
        if key not in self._lean:
            self._lean[key] = LeanDecode(model) if LeanDecode.supports(model) else None
        return self._lean[key]

    def _pick(self, logits: torch.Tensor) -> torch.Tensor:
        """Next token per row from last-position logits [B, V]."""
        if self.cfg.temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits.float() / self.cfg.temperature, dim=-1)
        if self.cfg.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > self.cfg.top_p
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p.masked_fill(drop, 0))  # a boolean index would sync
        # torch.multinomial's own draw for one sample (argmax of p / Exp(1) noise), without its
        # validity check, which reads the probabilities' min and max on the host: two syncs a token.
        noise = torch.empty_like(probs).exponential_(1, generator=self._gen)
        return (probs / noise).argmax(-1)

    def _static_len(self, needed: int) -> int:
        # Buckets of 256 so compiled graphs (specialized on the cache shape) are reused across runs.
        return min(self.context_len, max(256, -(-needed // 256) * 256))

    def _compiled_fn(self, model, level: str):
        """A compiled decode step (ids, static cache, position ids) → logits [B, 1, V]."""
        if level in self._compiled:
            return self._compiled[level]
        lean = self._lean_step(model)
        if lean is not None and lean.use_fused_step():  # built here, in the compile phase
            # A quantized Llama on CPU: its static-cache step is one C++ op (kernels/decode_step.cpp,
            # compiled ahead of time for this CPU by native.py), and torch.compile around that one op
            # only adds dynamo's and the C++ wrapper's handling of its 160 tensors: measured on the
            # default model's int4 step, 0.3-1 ms of a 4.5 ms step. So the op is the compiled step.
            self._compiled[level] = lean.static_step
            return lean.static_step
        if self.device.startswith("cuda"):
            mode = "reduce-overhead"  # CUDA graphs: one launch per step
        else:
            import torch._inductor.config as inductor

            # On CPU the per-step cost left is the generated wrapper calling each kernel from
            # Python; a C++ wrapper cuts it by a fifth (framework_overhead.py).
            mode, inductor.cpp_wrapper = "default", True
            weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
            _stream_gemv_on_cpu(inductor, on=weights > CACHE_BYTES)
            if level == "off" and weights > CACHE_BYTES:  # quantized variants' pools are there already
                pages.adopt(model)  # the step streams these weights: on huge pages (pages.py)
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

            def step(ids, cache, position_ids):
                return model(input_ids=ids, past_key_values=cache, position_ids=position_ids, use_cache=True, logits_to_keep=1).logits

        compiled = torch.compile(step, mode=mode, dynamic=False)

        def call(ids, cache, position_ids):
            # Once this shape is warm (_warm_compile ran it), dynamo's guards only pick among
            # graphs the engine itself compiled: checking all of them (every parameter, every
            # cache attribute) cost 30 us a step, a sixth of the tiny Llama's compiled step.
            # A shape not yet warm takes the full check, so a new shape still recompiles.
            # The stance is process-wide; it is switched only when it changes (a context
            # manager per step cost a third of the gain), and back at each run's end.
            trusted = (level, ids.shape[0], cache.layers[0].max_cache_len) in self._warm
            if trusted != self._trusting:
                torch.compiler.set_stance("default", skip_guard_eval_unsafe=trusted)
                self._trusting = trusted
            return compiled(ids, cache, position_ids)

        self._compiled[level] = call
        return call

    def _warm_compile(self, batch: int, max_len: int) -> None:
        """Compile (and run once) outside any run, so compile time is its own phase."""
        key = (self.levers.quant, batch, max_len)
        if key in self._warm:
            return
        from transformers import StaticCache

        model = self._variants[self.levers.quant]
        self.emit(Phase("compile", f"static cache {max_len}, batch {batch}, {self.levers.quant}", False))
        t0 = time.perf_counter()
        fn = self._compiled_fn(model, self.levers.quant)
        cache = StaticCache(config=model.config, max_cache_len=max_len)
        tok = torch.zeros((batch, 1), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self._forward(model, tok, cache, 0)  # eager first write, as a real prefill does
            for pos in (1, 2, 3):  # reduce-overhead records its CUDA graph on a later call
                self._forward(model, tok, cache, pos, fn=fn)
        self._warm.add(key)
        _freeze()
        how = "one C++ op (decode_step)" if getattr(self._lean_step(model), "fused", None) is not None else "torch.compile"
        self.emit(Phase("compile", f"batch {batch}, {self.levers.quant}: {how}", True, time.perf_counter() - t0))

    def _new_cache(self, model, needed: int):
        from transformers import DynamicCache, StaticCache

        if not self.levers.cache:
            return None
        if self.levers.compile:
            return StaticCache(config=model.config, max_cache_len=self._static_len(needed))
        return DynamicCache(config=model.config)

    def _poll(self, poll, run_id: int, state: dict) -> None:
        """Handle commands at a token boundary: levers apply now, stop ends the run, pause waits here."""
        paused_at = None
        cmds = list(poll())
        while cmds or paused_at is not None:
            if not cmds:
                time.sleep(0.02)
                cmds = list(poll())
                continue
            cmd = cmds.pop(0)
            kind = cmd[0]
            if kind == "lever":
                self._lever_in_run(cmd[1], cmd[2], run_id, state)
            elif kind == "pause" and paused_at is None:
                paused_at = time.perf_counter()
                self.emit(Phase("pause", "paused", False))
            elif kind == "resume" and paused_at is not None:
                self.emit(Phase("pause", "resumed", True, time.perf_counter() - paused_at))
                paused_at = None
            elif kind in ("stop", "shutdown"):
                if kind == "shutdown":
                    self.pending.append(cmd)
                self.pending.extend(c for c in cmds if c[0] not in ("pause", "resume", "stop"))
                if paused_at is not None:
                    self.emit(Phase("pause", "stopped while paused", True, time.perf_counter() - paused_at))
                raise _Stop
            elif kind not in ("pause", "resume"):
                self.pending.append(cmd)

    def _lever_in_run(self, name: str, value, run_id: int, state: dict) -> None:
        before = self.levers
        if not self.set_lever(name, value, run_id, state["segment"] + 1):
            return
        state["segment"] += 1
        after = self.levers
        # Weights, cache layout or batch changed: the cache must be rebuilt from the whole text.
        rebuild = (after.cache and not before.cache) or after.compile != before.compile or after.quant != before.quant or after.batch != before.batch
        state["reprefill"] = state["reprefill"] or rebuild
        if not after.cache:
            state["cache"] = None

    @torch.inference_mode()
    def run(self, req: RunRequest, poll=lambda: ()) -> RunFinished | None:
        try:
            ids_list, text = self.prompt_ids(req)
        except PromptError as exc:
            self.emit(EngineError(str(exc)))
            return None
        self._run_id += 1
        run_id = self._run_id
        if self.cfg.temperature > 0:
            self._gen.manual_seed(self.cfg.seed)
        max_new = req.max_new_tokens
        if self.levers.compile:
            self._prepare_compile(len(ids_list) + max_new)
        state = {"segment": 0, "reprefill": False, "cache": None}
        tokens: list[list[int]] = [list(ids_list) for _ in range(self.levers.batch)]
        prompt_len = len(ids_list)
        started = RunStarted(run_id, self.levers, prompt_len, max_new, text, req.preset if req.prompt is None else "custom")
        self.emit(started)
        peak_rss = rss_bytes()
        stop_reason = "max tokens"
        out_ids: list[int] = []
        decoder = _IncrementalDecoder(self.tok)
        finished_rows = [False] * self.levers.batch
        step_no = 0
        last_mem = last_rss = 0
        try:
            if self.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats(self.device)
            need_prefill, first = True, True
            while len(out_ids) < max_new:
                self._poll(poll, run_id, state)
                lev = self.levers
                model = self._variants[lev.quant]
                if lev.batch != len(tokens):  # batch lever: replicate sequence 0
                    tokens = [list(tokens[0]) for _ in range(lev.batch)]
                    finished_rows = [False] * lev.batch
                if state["reprefill"]:
                    need_prefill, state["reprefill"] = True, False
                    if lev.compile:
                        self._prepare_compile(len(tokens[0]) + max_new - len(out_ids))
                        lev = self.levers
                ctx_len = len(tokens[0])
                if ctx_len >= self.context_len:
                    stop_reason = "context full"
                    break
                proposed = accepted = 0
                t0 = now_ns()
                if need_prefill or not lev.cache:
                    kind = "prefill" if first else ("reprefill" if need_prefill else "decode")
                    ids = torch.tensor(tokens, device=self.device)
                    if lev.cache:
                        state["cache"] = self._new_cache(model, ctx_len + max_new - len(out_ids) + 8)
                    f0 = time.perf_counter_ns()
                    logits = self._forward(model, ids, state["cache"], 0)
                    new = self._pick(logits[:, -1]).unsqueeze(1)
                    forward_ns = time.perf_counter_ns() - f0
                    need_prefill = False
                    if self._draft is not None:
                        self._draft.reset()
                else:
                    props = None  # proposals on the device, [k]
                    if lev.spec == "lookup":
                        found = lookup_proposals(tokens[0], num_tokens=min(8, max_new - len(out_ids) - 1))
                        props = torch.tensor(found, device=self.device) if found else None
                    elif lev.spec == "draft" and max_new - len(out_ids) > 1:
                        props = self._draft_proposer().propose(tokens[0])[: max_new - len(out_ids) - 1]
                    last = torch.tensor([[row[-1]] for row in tokens], device=self.device)
                    f0 = time.perf_counter_ns()
                    if props is not None:
                        kind = "verify"
                        feed = torch.cat([last, props.unsqueeze(0)], dim=1)
                        logits = self._forward(model, feed, state["cache"], ctx_len - 1, keep=len(props) + 1)
                        checked = torch.cat([props, logits[0].argmax(-1)])
                    else:
                        kind = "decode"
                        fn = self._compiled_fn(model, lev.quant) if lev.compile else None
                        logits = self._forward(model, last, state["cache"], ctx_len - 1, fn=fn)
                        new = self._pick(logits[:, -1]).unsqueeze(1)
                    forward_ns = time.perf_counter_ns() - f0
                    if props is not None:
                        n = len(props)
                        # The proposals cross with the target's choices: the step's one device→host transfer.
                        checked_list = checked.tolist()
                        props_list, choice_list = checked_list[:n], checked_list[n:]
                        n_acc = accept_greedy(props_list, choice_list)
                        gained = props_list[:n_acc] + [choice_list[n_acc]]
                        state["cache"].crop(-(n - n_acc))
                        if lev.spec == "draft":
                            self._draft.settle(n_acc, n)
                        proposed, accepted = n, n_acc
                        new_rows = [gained]
                if kind != "verify":
                    new_rows = new.tolist()  # the step's one device→host transfer
                first = False
                remaining = max_new - len(out_ids)
                new_rows = [row[:remaining] for row in new_rows]
                for row, add in zip(tokens, new_rows):
                    row.extend(add)
                if not req.ignore_eos:
                    for i, add in enumerate(new_rows):
                        for j, t in enumerate(add):
                            if t in self.eos_ids:
                                finished_rows[i] = True
                                if i == 0:
                                    new_rows[0] = add[: j + 1]
                                break
                out_ids.extend(new_rows[0])
                t1 = now_ns()
                # Every token but the newest is in the cache (verify steps crop the rejected ones).
                kv = measure_cache(state["cache"], len(tokens[0]) - 1)
                step_no += 1
                self.emit(
                    Step(
                        run_id,
                        step_no,
                        kind,
                        new_rows[0],
                        decoder.push(new_rows[0]),
                        len(new_rows[0]),
                        t1,
                        t1 - t0,
                        forward_ns,
                        kv.used_bytes,
                        kv.alloc_bytes,
                        kv.seq_len,
                        state["segment"],
                        proposed,
                        accepted,
                    )
                )
                if self.device.startswith("cuda") and t1 - last_mem > 250_000_000:
                    last_mem = t1
                    mem = read_torch_memory(self.device)
                    if mem:
                        self.emit(mem)
                if t1 - last_rss > 20_000_000:  # peak RSS at 50 Hz: a /proc read per token is measurable on tiny models
                    last_rss = t1
                    peak_rss = max(peak_rss, rss_bytes())
                if all(finished_rows):
                    stop_reason = "eos"
                    break
        except _Stop:
            stop_reason = "stopped"
        except torch.OutOfMemoryError:
            state["cache"] = None
            gc.collect()
            self._empty_cuda_cache()
            self.emit(EngineError("out of memory during generation; try a smaller batch, a shorter prompt or quantization"))
            stop_reason = "out of memory"
        except Exception as exc:  # noqa: BLE001 - one broken run is reported, the session goes on
            self.emit(EngineError(f"generation failed: {type(exc).__name__}: {str(exc)[:300]}"))
            stop_reason = "error"
        return self._finish(run_id, ids_list, out_ids, stop_reason, peak_rss, decoder.text, req, mixed=state["segment"] > 0)

    def _prepare_compile(self, needed: int) -> None:
        """Compile for this shape now (its own phase); if inductor fails, the run goes on uncompiled."""
        try:
            self._warm_compile(self.levers.batch, self._static_len(needed))
        except Exception as exc:  # noqa: BLE001 - inductor failures vary; the run goes on uncompiled
            self._compiled.pop(self.levers.quant, None)
            self.levers = replace(self.levers, compile=False)
            self.emit(LeverRefused("compile", True, f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}"))

    def _empty_cuda_cache(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def _finish(self, run_id, prompt_ids, out_ids, stop_reason, peak_rss, text, req, mixed: bool = False) -> RunFinished:
        if self._trusting:  # the stance is process-wide: no other compiled code may inherit it
            torch.compiler.set_stance("default")
            self._trusting = False
        lev = self.levers
        # A run whose levers changed midway is compared, but never becomes the reference.
        plain = lev.is_plain() and not mixed and stop_reason in ("max tokens", "eos")
        if self.cfg.debug_leak_mb > 0:
            self._leak.append(bytearray(b"\x01" * int(self.cfg.debug_leak_mb * MB)))
        gc.collect()
        trim_heap()
        torch_peak = gpu_base = None
        if self.device.startswith("cuda"):
            torch_peak = int(torch.cuda.max_memory_allocated(self.device))
            gpu_base = int(torch.cuda.memory_allocated(self.device))
        key = (tuple(prompt_ids), req.ignore_eos)
        ref = self._reference.get(key)
        if self.cfg.temperature > 0:
            first_diff, note = None, "sampled: not compared"
        elif ref is not None:
            # Every greedy run is checked against plain greedy: cache, compile and speculation must
            # match it exactly, so a mismatch here is a bug made visible, not a quality trade-off.
            first_diff = _first_diff(ref, out_ids)
            note = "identical" if first_diff is None else f"differs at token {first_diff}"
            if plain and first_diff is None and len(out_ids) > len(ref):
                self._reference[key] = list(out_ids)
        elif plain:
            self._reference[key] = list(out_ids)
            first_diff, note = None, "reference"
        else:
            first_diff, note = None, "no reference yet"
        ev = RunFinished(
            run_id,
            len(out_ids),
            stop_reason,
            text,
            peak_rss,
            rss_bytes(),
            torch_peak,
            gpu_base,
            self.perplexity(lev.quant),
            first_diff,
            note,
        )
        self.emit(ev)
        return ev

    @torch.inference_mode()
    def perplexity(self, level: str) -> float | None:
        """Perplexity of the fixed reference text under a weight variant (cached per variant), in one
        prefill. A variant with our kernels computes it there as decode does (the kernels take
        every length, their rounded activations included; tests check it against a token-by-token
        decode): measured on the default model, rounding the int4 kernel's activations to int8 per
        group moved it from 24.56 to 25.00."""
        if level not in self._ppl:
            model = self._variants.get(level)
            if model is None:
                return None
            ids = self.tok(reference_text(), return_tensors="pt")["input_ids"][:, : min(512, self.context_len)].to(self.device)
            vocab = model.get_input_embeddings().num_embeddings
            if int(ids.max()) >= vocab:  # a tokenizer larger than the model's vocabulary: no honest number
                self._ppl[level] = None
                return None
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
            nll = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
            self._ppl[level] = float(math.exp(float(nll)))
        return self._ppl[level]


def _stream_gemv_on_cpu(inductor, on: bool) -> None:
    """Have inductor write a decode step's matrix-vector products as its own fused reductions.

    MKL's GEMV streams a weight matrix from memory at 11 GB/s on this CPU where a plain read runs
    at 27-29 (benchmarks/ceiling.py); inductor's reduction over the same weights runs at ~20, so
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


def _freeze() -> None:
    """Move what exists now (weights, compiled graphs) out of every later collection.

    These objects live as long as the engine; without this the full gc.collect() before each
    baseline scans them all: ~190 ms per run for the default model, measured.
    """
    gc.collect()
    gc.freeze()


def _first_diff(ref: list[int], out: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(ref, out)):
        if a != b:
            return i
    return None


class _IncrementalDecoder:
    """Detokenizes a growing token list without re-decoding all of it each step, and without
    emitting half a multi-byte character (byte-level BPE splits them across tokens)."""

    def __init__(self, tok):
        self.tok = tok
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0
        self.prefix_text = ""
        self.text = ""

    def push(self, new: list[int]) -> str:
        self.ids.extend(new)
        full = self.tok.decode(self.ids[self.prefix :], skip_special_tokens=True)
        if full.endswith("\ufffd") or len(full) <= len(self.prefix_text):
            return ""
        delta = full[len(self.prefix_text) :]
        # The next window starts at the tokens just consumed; its prefix text is decoded once here.
        self.prefix, self.read = self.read, len(self.ids)
        self.prefix_text = self.tok.decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        self.text += delta
        return delta
