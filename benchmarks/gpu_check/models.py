"""The models made on the GPU machine (random weights, the default model's tokenizer) and the bench that runs the engine on them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmarks.gpu_check import SWITCH_AT, TOKENIZER, WHEELS
from benchmarks.gpu_check.report import Failed, Skip, first_difference, judge_greedy, near_tie_tolerance
from tui_app.requests import SetLever


def tokenizer_dir(given: str | None) -> Path:
    """The default model's tokenizer and config: given, carried (make gpu-wheels), or the converted default here."""
    for candidate in (given, os.environ.get("TOKENTOP_TOKENIZER"), WHEELS / TOKENIZER):
        if candidate and (Path(candidate) / "tokenizer.json").is_file():
            return Path(candidate)
    from tui_app.engine.models import converted_default

    return converted_default()


def save_tokenizer(dest: Path) -> Path:
    """The converted default model's files but its weights: tokenizer, chat template, config (small)."""
    from tui_app.engine.models import SOURCE_RECORD, converted_default

    src = converted_default()
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != SOURCE_RECORD:
            shutil.copy2(f, dest / f.name)
    return dest


def random_llama(folder: Path, tok: Path, device: str, overrides: dict | None = None) -> Path:
    """A Llama with the default model's config (or that changed by `overrides`), random weights,
    its tokenizer; saved in bf16 to `folder`, made on `device` (a 1B model's init is slow on CPU)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig.from_pretrained(str(tok))
    for key, value in (overrides or {}).items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    del model
    for f in tok.iterdir():
        if f.is_file() and f.name != "config.json" and not (folder / f.name).exists():
            shutil.copy2(f, folder / f.name)
    return folder


class Bench:
    """An engine on a model folder in one dtype, its events kept, levers set per run."""

    def __init__(self, folder: Path, device: str, dtype: str, **config):
        from tui_app.engine.generation import Engine, EngineConfig

        self.events: list = []
        self.engine = Engine(EngineConfig(model=str(folder), device=device, dtype=dtype, **config), self.events.append)
        self.engine.load()
        self.dtype = dtype
        self._plain: dict[tuple, list[int]] = {}

    def run(self, req, poll=lambda: ()) -> tuple[list[int], list]:
        from monitors.events import EngineError, Step

        self.events.clear()
        self.engine.run(req, poll=poll)
        events = list(self.events)
        errors = [e.message for e in events if isinstance(e, EngineError)]
        if errors:
            raise Failed(f"engine error: {errors[0]}")
        return [t for e in events if isinstance(e, Step) for t in e.token_ids], events

    def plain(self, req) -> list[int]:
        from tui_app.commands.bench import apply_levers

        key = (req.preset, req.max_new_tokens)
        if key not in self._plain:
            apply_levers(self.engine, {})
            self._plain[key] = self.run(req)[0]
        return self._plain[key]

    def logit_gap(self, req, plain: list[int], i: int, other: int) -> tuple[float, float]:
        """Plain's logit for its own token i minus its logit for `other`, and the largest |logit| there."""
        import torch

        ids, _ = self.engine.prompt_ids(req)
        with torch.inference_mode():
            x = torch.tensor([ids + plain[:i]], device=self.engine.device)
            logits = self.engine.model(input_ids=x).logits[0, -1].float()
        return float(logits[plain[i]] - logits[other]), float(logits.abs().max())

    def switched(self, combo: dict, req, switch_at: int = SWITCH_AT) -> tuple[list[int], list]:
        """A run that starts plain and changes to `combo` at the start of step `switch_at`, as a user would."""
        from monitors.events import LeverRefused, Levers
        from tui_app.commands.bench import apply_levers
        from tui_app.core.tour import APPLY_ORDER

        apply_levers(self.engine, {})
        target, calls = Levers(**combo), 0

        def poll():
            nonlocal calls
            calls += 1
            if calls != switch_at:
                return ()
            return [SetLever(n, getattr(target, n)) for n in APPLY_ORDER if getattr(target, n) != getattr(Levers(), n)]

        try:
            tokens, events = self.run(req, poll)
        finally:
            apply_levers(self.engine, {})
        refused = [f"{e.lever}: {e.reason}" for e in events if isinstance(e, LeverRefused)]
        if refused:
            raise Skip("refused: " + "; ".join(refused))
        return tokens, events


def lever_check(bench: Bench, combo: dict, req) -> tuple[str, str]:
    import torch

    from monitors.events import Step

    plain = bench.plain(req)
    tokens, events = bench.switched(combo, req)
    segments = {e.segment for e in events if isinstance(e, Step)}
    if len(segments) < 2:
        raise Failed(f"the levers never took effect mid-run (segments {sorted(segments)})")
    i = first_difference(plain, tokens)
    gap, scale = (None, 0.0) if i is None or i >= min(len(plain), len(tokens)) else bench.logit_gap(req, plain, i, tokens[i])
    tolerance = near_tie_tolerance(torch.finfo(bench.engine.dtype).eps, scale)
    figure, reference = judge_greedy(plain, tokens, "quant" not in combo, (lambda _: gap) if gap is not None else None, tolerance)
    return f"switched at step {SWITCH_AT}: {figure}", reference


def check_device_leak(bench: Bench, combo: dict, req, runs: int, leak_mb: float = 0.0) -> tuple[str, str]:
    """The app's leak detector on the device's memory (Session.device_leaks) over `runs` runs with
    `combo` set: quiet on clean runs; with `leak_mb` kept on the device each run (--demo-leak),
    suspected within `runs`."""
    from monitors.events import Phase, RunFinished
    from tui_app.commands.bench import apply_levers
    from tui_app.core.session import DEVICE_BASELINES, Session

    apply_levers(bench.engine, combo)
    session = Session()
    bench.engine.cfg.demo_leak_mb = leak_mb
    try:
        for _ in range(runs):
            for ev in bench.run(req)[1]:
                if isinstance(ev, RunFinished | Phase):
                    session.feed(ev)
    finally:
        bench.engine.cfg.demo_leak_mb = 0.0
        bench.engine._leak.clear()
        apply_levers(bench.engine, {})
    verdicts = session.device_verdicts
    missing = [name for name, _ in DEVICE_BASELINES if name not in verdicts]
    if missing:
        raise Failed(f"no baseline from {', '.join(missing)}")
    figure = "; ".join(f"{name} {v.status} {v.mb_per_run:+.2f} MB/run [{v.low:.2f}, {v.high:.2f}]" for name, v in verdicts.items())
    suspected = [name for name, v in verdicts.items() if v.status == "suspected"]
    if leak_mb:
        if not suspected:
            raise Failed(f"a {leak_mb:g} MB/run device leak not caught in {runs} runs", figure)
        return figure, f"{leak_mb:g} MB kept on the device per run, {runs} runs: caught"
    if suspected:
        raise Failed(f"{runs} clean runs called a leak in {', '.join(suspected)}", figure)
    return figure, f"{runs} clean runs: no leak"
