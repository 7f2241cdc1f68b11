"""The generation engine: a prefill/decode loop that emits an event per step and applies levers
at token boundaries, continuing the same text.

Why our own loop and not `model.generate`: generate() hides its steps (no per-step timing, no
cache object to measure) and cannot change cache type, weights or speculation mid-run. The loop
does one device→host transfer per step (the new token ids), where generate() does about three.

The engine's other concerns are its own files, parts of the same class: lever_control.py (what a
lever may do now, applying it, the weight variants, compiled steps and draft it needs) and
quality.py (the plain greedy reference and perplexity each run is checked against).
"""

from __future__ import annotations

import functools
import gc
import os
import time

import torch

from monitors.events import EngineError, EngineReady, Levers, Phase, RunFinished, RunStarted, Step, now_ns
from monitors.gpu import NvmlReader
from monitors.kvcache import measure_cache
from monitors.system import PeakRss, rss_bytes, trim_heap
from monitors.text import plural
from monitors.torch_memory import read_torch_memory
from tui_app.engine import levers as lv
from tui_app.engine.config import EngineConfig, RunRequest
from tui_app.engine.lean import LeanDecode
from tui_app.engine.lever_control import MB, LeverControl, freeze
from tui_app.engine.models import ModelError, cache_kwarg, load_model, placement, resolve_device, resolve_dtype
from tui_app.engine.quality import QualityChecks
from tui_app.engine.speculative import DraftProposer, accept_greedy, lookup_proposals
from tui_app.prompts import preset_prompt

__all__ = ["Engine", "EngineConfig", "PromptError", "RunRequest"]


class PromptError(ValueError):
    """Bad prompt or length settings; the message says what to do."""


class _Stop(Exception):
    pass


def _default_threads() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


class Engine(LeverControl, QualityChecks):
    def __init__(self, config: EngineConfig, emit):
        self.cfg = config
        self.emit = emit
        self._init_levers(config.levers)
        self._init_quality()
        self.pending: list[tuple] = []
        self._lean: dict[int, LeanDecode | None] = {}  # per weight variant (id of the module)
        self._leak: list = []  # --debug-leak-mb's blocks, never freed
        self._run_id = config.first_run_id - 1  # a restarted engine continues the session's numbering

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
        progress = lambda m: self.emit(Phase("load", m, False))  # noqa: E731
        loaded = load_model(cfg.model, self.device, self.dtype, progress, device_map=cfg.device_map, max_memory=cfg.max_memory)
        self.model, self.tok, self.model_name = loaded.model, loaded.tokenizer, loaded.name
        self.placement = placement(self.model)
        # accelerate's hooks move activations between devices, or weights in from disk
        self.split = len(self.placement) > 1 or "disk" in self.placement
        self.gpus = tuple(d for d in self.placement if d.startswith("cuda"))
        if cfg.device_map:  # inputs, sampling and timing go where accelerate put the embeddings
            embed = self.model.get_input_embeddings().weight
            self.device = "cpu" if embed.is_meta else str(embed.device)
            self._gen = torch.Generator(self.device)
        self.model.generation_config.pad_token_id = self.tok.pad_token_id or self.tok.eos_token_id
        from transformers import DynamicCache

        self._dynamic_cache = DynamicCache
        self._variants["off"] = self.model
        self.emit(Phase("load", f"{loaded.name} from {loaded.source}", True, loaded.load_s))
        c = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        self.n_layers = int(getattr(c, "num_hidden_layers", None) or c.n_layer)
        n_heads = int(getattr(c, "num_attention_heads", None) or c.n_head)
        self.kv_heads = int(getattr(c, "num_key_value_heads", None) or n_heads)
        hidden = int(getattr(c, "hidden_size", None) or c.n_embd)
        self.head_dim = int(getattr(c, "head_dim", None) or hidden // n_heads)
        self.context_len = int(getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", 2048))
        self.eos_ids = self._eos_ids()
        params = list(self.model.parameters())
        seen = {id(p) if p.is_meta else p.data_ptr(): p for p in params}  # tied weights once; offloaded ones have no storage here
        self.n_params = sum(p.numel() for p in seen.values())
        self.weight_bytes = sum(p.numel() * p.element_size() for p in seen.values())
        if cfg.draft_model:
            draft = load_model(
                cfg.draft_model, self.device, self.dtype, progress=lambda m: self.emit(Phase("load", f"draft: {m}", False)), option="--draft-model"
            )
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
            placement=self.placement if cfg.device_map else None,
        )
        self.ready = ready
        freeze()
        if self.levers.quant == "off":  # the weights a first run reads: measured before the engine says it is ready (and idle)
            self.probe_if_due()
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
                    f"the prompt is {plural(len(ids), 'token')} and {plural(req.max_new_tokens, 'new token')} are asked for, "
                    f"but the model's context is {self.context_len}; shorten it, ask for fewer tokens, or pass --truncate left"
                )
            ids = ids[-room:]
        return ids, text

    # ---------------------------------------------------------------- forward, sampling, cache
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
        out = model(input_ids=ids, **{cache_kwarg(type(model)): cache}, position_ids=position_ids, use_cache=cache is not None, logits_to_keep=keep)
        return out.logits

    def _lean_step(self, model) -> LeanDecode | None:
        key = id(model)
        if key not in self._lean:
            # Split over devices, the model's own forward: its outermost hook brings the logits back.
            self._lean[key] = LeanDecode(model) if LeanDecode.supports(model) and not self.split else None
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
                self._phase_done("pause", "resumed", time.perf_counter() - paused_at)
                paused_at = None
            elif kind == "probe":
                self.request_probe()
            elif kind in ("stop", "shutdown"):
                if kind == "shutdown":
                    self.pending.append(cmd)
                self.pending.extend(c for c in cmds if c[0] not in ("pause", "resume", "stop"))
                if paused_at is not None:
                    self._phase_done("pause", "stopped while paused", time.perf_counter() - paused_at)
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
        started = RunStarted(run_id, self.levers, len(ids_list), max_new, text, req.preset if req.prompt is None else "custom")
        self.emit(started)
        memory = _MemoryWatch(self.device, self.emit, self.gpus)
        # A step's interval runs from the previous emission (RunStarted's for the first) to its own,
        # less the phases (pause, compile, quantize) between: everything the loop does per token
        # counts, as a reader of the events sees it, and TTFT + the intervals = end-to-end.
        last_emit, phases_at = started.t_ns, self._phase_ns
        stop_reason = "max tokens"
        out_ids: list[int] = []
        decoder = _IncrementalDecoder(self.tok)
        finished_rows = [False] * self.levers.batch
        step_no = 0
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
                self.probe_if_due()  # asked for during the run: a phase of its own, outside the step's interval
                if len(tokens[0]) >= self.context_len:
                    stop_reason = "context full"
                    break
                remaining = max_new - len(out_ids)
                proposed = accepted = 0
                t0, phases_before = now_ns(), self._phase_ns
                if need_prefill or not lev.cache:
                    kind = "prefill" if first else ("reprefill" if need_prefill else "decode")
                    new_rows, forward_ns = self._prefill(model, tokens, state, remaining)
                    need_prefill = False
                elif (props := self._proposals(lev.spec, tokens[0], remaining)) is not None:
                    kind = "verify"
                    new_rows, forward_ns, proposed, accepted = self._verify(model, lev.spec, tokens[0], state["cache"], props)
                else:
                    kind = "decode"
                    new_rows, forward_ns = self._decode(model, lev, tokens, state["cache"])
                first = False
                new_rows = self._extend(tokens, new_rows, remaining, finished_rows, req.ignore_eos)
                out_ids.extend(new_rows[0])
                compute_ns = now_ns() - t0 - (self._phase_ns - phases_before)  # less a recompile inside the step
                # Every token but the newest is in the cache (verify steps crop the rejected ones).
                kv = measure_cache(state["cache"], len(tokens[0]) - 1)
                delta = decoder.push(new_rows[0])
                step_no += 1
                t1 = now_ns()
                dt_ns = t1 - last_emit - (self._phase_ns - phases_at)
                last_emit, phases_at = t1, self._phase_ns
                self.emit(
                    Step(
                        run_id,
                        step_no,
                        kind,
                        new_rows[0],
                        delta,
                        len(new_rows[0]),
                        t1,
                        dt_ns,
                        forward_ns,
                        kv.used_bytes,
                        kv.alloc_bytes,
                        kv.seq_len,
                        state["segment"],
                        proposed,
                        accepted,
                        compute_ns,
                    )
                )
                memory.tick(t1)
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
        return self._finish(run_id, ids_list, out_ids, stop_reason, memory.peak_rss, decoder.text, req, mixed=state["segment"] > 0)

    # ---------------------------------------------------------------- one step each
    def _prefill(self, model, tokens: list[list[int]], state: dict, remaining: int) -> tuple[list[list[int]], int]:
        """The whole text in one forward (a new cache when the cache is on); without the cache, every step is this."""
        ids = torch.tensor(tokens, device=self.device)
        if self.levers.cache:
            state["cache"] = self._new_cache(model, len(tokens[0]) + remaining + 8)
        f0 = time.perf_counter_ns()
        logits = self._forward(model, ids, state["cache"], 0)
        new = self._pick(logits[:, -1]).unsqueeze(1)
        forward_ns = time.perf_counter_ns() - f0
        if self._draft is not None:
            self._draft.reset()
        return new.tolist(), forward_ns  # the step's one device→host transfer

    def _proposals(self, spec: str, row: list[int], remaining: int) -> torch.Tensor | None:
        """Tokens to verify in one step, on the device ([k]); None: a plain decode step."""
        if spec == "lookup":
            found = lookup_proposals(row, num_tokens=min(8, remaining - 1))
            return torch.tensor(found, device=self.device) if found else None
        if spec == "draft" and remaining > 1:
            return self._draft_proposer().propose(row)[: remaining - 1]
        return None

    def _decode(self, model, lev: Levers, tokens: list[list[int]], cache) -> tuple[list[list[int]], int]:
        last = torch.tensor([[row[-1]] for row in tokens], device=self.device)
        f0 = time.perf_counter_ns()
        fn = self._compiled_fn(model, lev.quant) if lev.compile else None
        logits = self._forward(model, last, cache, len(tokens[0]) - 1, fn=fn)
        new = self._pick(logits[:, -1]).unsqueeze(1)
        forward_ns = time.perf_counter_ns() - f0
        return new.tolist(), forward_ns  # the step's one device→host transfer

    def _verify(self, model, spec: str, row: list[int], cache, props: torch.Tensor) -> tuple[list[list[int]], int, int, int]:
        """The last token and the proposals in one forward; keeps the proposals the target agrees
        with plus its own next token, and crops the rest from the cache."""
        last = torch.tensor([[row[-1]]], device=self.device)
        f0 = time.perf_counter_ns()
        feed = torch.cat([last, props.unsqueeze(0)], dim=1)
        logits = self._forward(model, feed, cache, len(row) - 1, keep=len(props) + 1)
        checked = torch.cat([props, logits[0].argmax(-1)])
        forward_ns = time.perf_counter_ns() - f0
        n = len(props)
        # The proposals cross with the target's choices: the step's one device→host transfer.
        checked_list = checked.tolist()
        props_list, choice_list = checked_list[:n], checked_list[n:]
        n_acc = accept_greedy(props_list, choice_list)
        gained = [*props_list[:n_acc], choice_list[n_acc]]
        cache.crop(-(n - n_acc))
        if spec == "draft":
            self._draft.settle(n_acc, n)
        return [gained], forward_ns, n, n_acc

    def _extend(self, tokens: list[list[int]], new_rows: list[list[int]], remaining: int, finished_rows: list[bool], ignore_eos: bool) -> list[list[int]]:
        """Append each row's new tokens (at most `remaining`) and mark rows that reached an end of
        sequence; returns the new tokens with row 0's cut after its end of sequence."""
        new_rows = [row[:remaining] for row in new_rows]
        for row, add in zip(tokens, new_rows, strict=True):
            row.extend(add)
        if not ignore_eos:
            for i, add in enumerate(new_rows):
                for j, t in enumerate(add):
                    if t in self.eos_ids:
                        finished_rows[i] = True
                        if i == 0:
                            new_rows[0] = add[: j + 1]
                        break
        return new_rows

    def _empty_cuda_cache(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def _finish(self, run_id, prompt_ids, out_ids, stop_reason, peak_rss, text, req, mixed: bool = False) -> RunFinished:
        self._stop_trusting()
        lev = self.levers
        # A run whose levers changed midway is compared, but never becomes the reference.
        plain = lev.is_plain() and not mixed and stop_reason in ("max tokens", "eos")
        if self.cfg.debug_leak_mb > 0:
            self._leak.append(self._debug_leak(int(self.cfg.debug_leak_mb * MB)))
        gc.collect()
        trim_heap()
        torch_peak = gpu_base = gpu_reserved = gpu_proc = None
        mem = read_torch_memory(self.device, self.gpus)
        if mem is not None:
            torch_peak, gpu_base, gpu_reserved = mem.peak, mem.allocated, mem.reserved
            gpu_proc = self._nvml.process_memory({os.getpid()})
        first_diff, note = self._compare(prompt_ids, out_ids, req.ignore_eos, plain)
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
            gpu_reserved=gpu_reserved,
            gpu_proc_mem=gpu_proc,
        )
        self.emit(ev)
        return ev

    def _debug_leak(self, nbytes: int):
        """Memory kept on the engine's device, where a real leak of this engine would be."""
        if self.device.startswith("cuda"):
            return torch.ones(nbytes, dtype=torch.uint8, device=self.device)
        return bytearray(b"\x01" * nbytes)

    @functools.cached_property
    def _nvml(self) -> NvmlReader:
        # The driver's count of this process's device memory: the CUDA context and every pool,
        # CUDA graphs' private ones too, which the allocator's figures leave out.
        return NvmlReader()


class _MemoryWatch:
    """A run's peak RSS (the kernel's high-water mark, restarted here: monitors.system.PeakRss), and
    on CUDA torch's memory, emitted at 4 Hz."""

    def __init__(self, device: str, emit, gpus: tuple[str, ...] = ()):
        self.device, self.emit, self.gpus = device, emit, gpus
        self.cuda = device.startswith("cuda")
        self._peak = PeakRss()
        self._peak.reset()
        self.last_mem = 0

    @property
    def peak_rss(self) -> int:
        return self._peak.read()

    def tick(self, now: int) -> None:
        if self.cuda and now - self.last_mem > 250_000_000:
            self.last_mem = now
            mem = read_torch_memory(self.device, self.gpus)
            if mem:
                self.emit(mem)


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
