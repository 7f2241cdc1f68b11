"""`make gpu-check`: every CUDA path of tokentop on one GPU, one line per check and a Markdown report.

Each check prints one line, `STATUS | name | figure | reference | reason`, and the report (a
Markdown table of the same lines, plus the logs of what ran beside) is rewritten after each, so
a run cut short still leaves one. A check catches its own failure: one FAIL never stops the rest.
Without CUDA it says so in one line and exits 2.

The lent GPU machine has no network and no copy of the default model (its GGUF is 98 MB, more
than the 64 MiB that travels there), so models are made there from a config with random weights
and the default model's tokenizer: the default model's own architecture for the levers and the
instruments, and a Llama of about 1B parameters for the bandwidth figure. Random weights serve
speed, memory, every instrument and the equality of greedy outputs between levers; what needs the
real weights (perplexity under int8/int4) runs only where the default model is installed, and
says SKIP with that reason elsewhere.

Here, on a machine with network: `make gpu-wheels` (the wheels that machine lacks and the
tokenizer, into .gpu-wheels/). There: `make gpu-check` (docs/gpu.md).

    python3 benchmarks/gpu_check.py [--out DIR] [--budget-s 420] [--only TEXT] [--start-at TEXT]
    .venv/bin/python benchmarks/gpu_check.py --wheels .gpu-wheels
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import itertools
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".gpu-wheels"
TOKENIZER = "default-tokenizer"  # inside the wheels folder: the default model's tokenizer and config
# What tokentop imports that the lent machine's image lacks (docs/gpu.md), at the versions this venv holds.
CARRIED = (
    "textual",
    "textual-serve",
    "aiohttp-jinja2",
    "rich",
    "markdown-it-py",
    "mdurl",
    "linkify-it-py",
    "uc-micro-py",
    "platformdirs",
    "typing-extensions",
    "pygments",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "certifi",
    "idna",
    "httpx-sse",
    "gguf",
    "pytest-asyncio",
    # The machine has transformers 5.17; the one tested here runs there too (its own requirements,
    # huggingface-hub, tokenizers and safetensors, are there at versions it takes; regex may be older).
    "transformers",
    "regex",
)
# tmux's libraries that a CUDA image may lack (libc, libm, libtinfo and libresolv it has).
TMUX_LIBS = ("libevent_core-2.1", "libutempter")
# The release built against the lent machine's torch 2.11 (torchao's compatibility table).
TORCHAO = "torchao==0.17.0"
CARRY_LIMIT = 64 * 2**20
MiB = 2**20
NEW_TOKENS = 24
SWITCH_AT = 6  # the step at whose start the levers change: a user's switch mid-run
# One lever per group; a pair takes two different groups (two quant levels are no pair).
LEVER_GROUPS = {
    "cache": {"no-cache": {"cache": False}},
    "compile": {"compile": {"compile": True}},
    "quant": {"int8": {"quant": "int8"}, "int4": {"quant": "int4"}},
    "spec": {"lookup": {"spec": "lookup"}, "draft": {"spec": "draft"}},
    "batch": {"b2": {"batch": 2}, "b4": {"batch": 4}, "b8": {"batch": 8}},
}
# ~1B parameters (Llama 3.2 1B's shape with the default model's vocabulary): enough to load the GPU's memory bus.
BIG = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}


# ---------------------------------------------------------------- checks and the report


@dataclass
class Check:
    status: str  # PASS, FAIL or SKIP
    name: str
    figure: str = ""
    reference: str = ""
    reason: str = ""
    seconds: float = 0.0

    def cells(self) -> list[str]:
        return [self.status, self.name, self.figure or "-", self.reference or "-", self.reason or "-"]

    def line(self) -> str:
        return " | ".join(self.cells())


class Skip(Exception):
    """A check that cannot run here; the message says why."""


class Failed(Exception):
    """A check that ran and disagreed: its figure and reference go into the report beside the reason."""

    def __init__(self, reason: str, figure: str = "", reference: str = ""):
        super().__init__(reason)
        self.figure, self.reference = figure, reference


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_check(name: str, fn) -> Check:
    """`fn()` returns (figure, reference); raises Skip or Failed, or anything else, which is a FAIL with its type."""
    t0 = time.perf_counter()
    try:
        figure, reference = fn()
        check = Check("PASS", name, figure, reference)
    except Skip as exc:
        check = Check("SKIP", name, reason=one_line(exc))
    except Failed as exc:
        check = Check("FAIL", name, exc.figure, exc.reference, one_line(exc))
    except Exception as exc:  # noqa: BLE001 - one broken check is reported and the others still run
        check = Check("FAIL", name, reason=one_line(f"{type(exc).__name__}: {exc}"))
    check.seconds = time.perf_counter() - t0
    return check


class Report:
    """The checks so far as a Markdown file, rewritten after each one; logs of subprocesses beside."""

    def __init__(self, path: Path, header: list[str], budget_s: float, only: str = "", echo=print, start_at: str = ""):
        self.path, self.header, self.only, self.echo = path, header, only, echo
        self.start_at = start_at  # a second run goes on where the first one's budget ended
        self.deadline = time.monotonic() + budget_s
        self.budget_s = budget_s
        self.checks: list[Check] = []
        self.logs: dict[str, str] = {}

    def check(self, name: str, fn) -> Check | None:
        if self.start_at and self.start_at not in name:
            return None
        self.start_at = ""
        if self.only and self.only not in name:
            return None
        if time.monotonic() > self.deadline:
            result = Check("SKIP", name, reason=f"the time budget ({self.budget_s:.0f} s) is spent; rerun with --start-at '{name}'")
        else:
            # In the report while it runs: a run killed at the command's time limit shows which check hung.
            self.checks.append(Check("FAIL", name, reason="did not finish: the run was stopped during this check"))
            self.write()
            result = run_check(name, fn)
            self.checks.pop()
        self.checks.append(result)
        self.echo(result.line(), flush=True)
        self.write()
        return result

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in ("PASS", "FAIL", "SKIP")}

    def markdown(self) -> str:
        counts = self.counts()
        lines = ["# tokentop GPU check", "", *[f"- {h}" for h in self.header], f"- {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP", ""]
        lines += ["| status | check | figure | reference | reason | s |", "|---|---|---|---|---|---|"]
        for c in self.checks:
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in c.cells()) + f" | {c.seconds:.1f} |")
        for title, text in self.logs.items():
            lines += ["", f"## {title}", "", "```", text.rstrip(), "```"]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(self.markdown())


# ---------------------------------------------------------------- comparisons, device-independent


def agree(ours: float, ref: float, rel: float, abs_: float = 0.0, unit: str = "", what: str = "") -> tuple[str, str]:
    """(figure, reference) when |ours − ref| ≤ abs_ + rel·|ref|; else Failed."""
    figure, reference = f"{ours:.4g}{unit}", f"{ref:.4g}{unit}"
    if abs(ours - ref) > abs_ + rel * abs(ref):
        raise Failed(f"{what or 'reading'} off by {ours - ref:+.4g}{unit} (allowed ±{abs_ + rel * abs(ref):.4g}{unit})", figure, reference)
    return figure, reference


def parse_csv(text: str) -> list[list[str]]:
    """nvidia-smi's `--format=csv,noheader,nounits`: one row a line, cells trimmed; '[N/A]' stays as is."""
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def lever_cases() -> list[tuple[str, dict]]:
    """Every lever alone, then every pair of levers from two different groups."""
    singles = [(name, combo, group) for group, levers in LEVER_GROUPS.items() for name, combo in levers.items()]
    cases = [(name, combo) for name, combo, _ in singles]
    for (a, ca, ga), (b, cb, gb) in itertools.combinations(singles, 2):
        if ga != gb:
            cases.append((f"{a}+{b}", {**ca, **cb}))
    return cases


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two outputs differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # the shorter one's end is checked below
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie_tolerance(dtype_eps: float, logits_scale: float) -> float:
    """How far apart two logits may be and still swap under a different kernel's rounding: a few
    ulps of the largest logit, as each of a deep model's layers rounds in the working precision."""
    return 4 * dtype_eps * logits_scale + 1e-3


def judge_greedy(plain: list[int], got: list[int], lossless: bool, gap_at=None, tolerance: float = 0.0) -> tuple[str, str]:
    """A lossless lever must give plain's greedy tokens, except at a near-tie (`gap_at(i)`: plain's
    logit gap there between its choice and the lever's); a lossy one (int8/int4) is reported only:
    on random weights its differences say nothing of its quality."""
    i = first_difference(plain, got)
    reference = f"plain greedy, {len(plain)} tokens"
    if i is None:
        return f"same {len(got)} tokens", reference
    if not lossless:
        return f"first differs at token {i}", reference + " (lossy: reported, not judged)"
    if i >= min(len(plain), len(got)):
        raise Failed(f"{len(got)} tokens where plain gave {len(plain)}", f"{len(got)} tokens", reference)
    gap = gap_at(i) if gap_at is not None else float("inf")
    if gap <= tolerance:
        return f"same up to token {i}, a near-tie there (gap {gap:.3g} ≤ {tolerance:.3g})", reference
    raise Failed(f"greedy output differs from plain at token {i}, logit gap {gap:.3g} > {tolerance:.3g}", f"differs at {i}", reference)


# ---------------------------------------------------------------- models made here


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
        from tui_app.commands.bench import _APPLY_ORDER, apply_levers

        apply_levers(self.engine, {})
        target, calls = Levers(**combo), 0

        def poll():
            nonlocal calls
            calls += 1
            if calls != switch_at:
                return ()
            return [("lever", n, getattr(target, n)) for n in _APPLY_ORDER if getattr(target, n) != getattr(Levers(), n)]

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
    `combo` set: quiet on clean runs; with `leak_mb` kept on the device each run (--debug-leak-mb),
    suspected within `runs`."""
    from monitors.events import Phase, RunFinished
    from tui_app.commands.bench import apply_levers
    from tui_app.core.session import DEVICE_BASELINES, Session

    apply_levers(bench.engine, combo)
    session = Session()
    bench.engine.cfg.debug_leak_mb = leak_mb
    try:
        for _ in range(runs):
            for ev in bench.run(req)[1]:
                if isinstance(ev, RunFinished | Phase):
                    session.feed(ev)
    finally:
        bench.engine.cfg.debug_leak_mb = 0.0
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


# ---------------------------------------------------------------- checks that need CUDA


def smi(*args: str) -> list[list[str]]:
    if shutil.which("nvidia-smi") is None:
        raise Skip("nvidia-smi is not on the PATH")
    out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True).stdout
    return parse_csv(out)


def check_torch_memory(device: str) -> tuple[str, str]:
    import torch

    from monitors.torch_memory import read_torch_memory

    before = read_torch_memory(device)
    x = torch.empty(64 * MiB, dtype=torch.uint8, device=device)
    during = read_torch_memory(device)
    stats = torch.cuda.memory_stats(device)
    del x
    if during is None or before is None:
        raise Failed("read_torch_memory gave None on CUDA")
    ref = (stats["allocated_bytes.all.current"], stats["reserved_bytes.all.current"])
    if (during.allocated, during.reserved) != ref:
        raise Failed("allocated/reserved differ from memory_stats", f"{during.allocated}/{during.reserved}", f"{ref[0]}/{ref[1]}")
    agree(during.allocated - before.allocated, 64 * MiB, 0, what="a 64 MiB tensor's allocated bytes")
    figure = f"allocated {during.allocated / MiB:.1f} MiB, reserved {during.reserved / MiB:.1f} MiB, +64.0 MiB for a 64 MiB tensor"
    return figure, "torch.cuda.memory_stats, the tensor's size"


def check_nvml_process(device: str) -> tuple[str, str]:
    import torch

    from monitors.gpu import NvmlReader

    x = torch.empty(512 * MiB, dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    reader = NvmlReader()
    reading = reader.read({os.getpid()})
    reader.close()
    if not reading.available:
        raise Failed(reading.reason)
    index = torch.cuda.current_device()
    ours = reading.gpus[index].proc_mem or 0
    rows = {int(pid): float(mem) for pid, mem in smi("--query-compute-apps=pid,used_memory") if mem.replace(".", "").isdigit()}
    del x
    if os.getpid() not in rows:
        raise Failed(f"nvidia-smi does not list this process (pid {os.getpid()}; it lists {sorted(rows)}): a pid namespace?", f"{ours / MiB:.0f} MiB")
    figure, reference = agree(ours / MiB, rows[os.getpid()], 0, 2, " MiB", "NVML process memory")
    if ours < torch.cuda.memory_reserved(device):
        raise Failed("process memory below the allocator's reserved bytes", figure, f"reserved {torch.cuda.memory_reserved(device) / MiB:.0f} MiB")
    return figure, f"nvidia-smi --query-compute-apps {reference}"


def check_nvml_device(device: str) -> tuple[str, str]:
    import torch

    from monitors.gpu import NvmlReader

    reader = NvmlReader()
    reading = reader.read()
    rows = smi("--query-gpu=index,memory.used,memory.total")
    reader.close()
    if not reading.available:
        raise Failed(reading.reason)
    if len(rows) != len(reading.gpus):
        raise Failed(f"NVML lists {len(reading.gpus)} GPUs, nvidia-smi {len(rows)}")
    g, row = reading.gpus[torch.cuda.current_device()], rows[torch.cuda.current_device()]
    used, used_ref = agree((g.mem_used or 0) / MiB, float(row[1]), 0, 64, " MiB", "device memory used")
    total, total_ref = agree((g.mem_total or 0) / MiB, float(row[2]), 0, 1, " MiB", "device memory total")
    return f"used {used}, total {total}", f"nvidia-smi --query-gpu used {used_ref}, total {total_ref}"


def check_nvml_load(device: str) -> tuple[str, str]:
    """Utilization and power under a matrix-product load, read by NVML and by nvidia-smi one after the other."""
    import torch

    from monitors.gpu import NvmlReader

    stop = threading.Event()

    def load():
        a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        time.sleep(2.0)
        reader = NvmlReader()
        g = reader.read().gpus[torch.cuda.current_device()]
        row = smi("--query-gpu=utilization.gpu,power.draw,clocks.sm")[torch.cuda.current_device()]
        reader.close()
    finally:
        stop.set()
        worker.join()
    util, util_ref = agree(g.sm_util or 0.0, float(row[0]), 0, 15, " %", "SM utilization")
    if (g.sm_util or 0) < 50:
        raise Failed("SM utilization under a matrix-product load below 50 %", util, util_ref)
    power, power_ref = ("n/a", row[1]) if g.power_w is None or not row[1].replace(".", "").isdigit() else agree(g.power_w, float(row[1]), 0.2, 0, " W", "power")
    clock, clock_ref = agree(float(g.sm_clock_mhz or 0), float(row[2]), 0.1, 0, " MHz", "SM clock")
    return f"util {util}, power {power}, SM clock {clock}", f"nvidia-smi util {util_ref}, power {power_ref}, clock {clock_ref}"


class Clock:
    """Marks on a clock of its own: on CUDA, events timed by the GPU; on the CPU, perf_counter (the
    CPU half of the comparison, the same code on the host's clock)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.name = "CUDA events" if self.cuda else "perf_counter"

    def mark(self):
        if not self.cuda:
            return time.perf_counter_ns()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) / 1e6

    def settle(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def check_timing(bench: Bench, req) -> tuple[str, str]:
    """TTFT and inter-token latency as the UI folds them from the events, against a clock's marks
    (CUDA events on a GPU) made as each event reaches the UI's side."""
    from monitors.events import RunStarted, Step
    from monitors.timing import RunTimer, percentile
    from tui_app.commands.bench import apply_levers

    apply_levers(bench.engine, {})
    clock = Clock(bench.engine.device)
    marks: list[tuple[object, object]] = []
    emit = bench.engine.emit

    def mark(ev):
        if isinstance(ev, RunStarted | Step):
            marks.append((ev, clock.mark()))
        emit(ev)

    bench.engine.emit = mark
    try:
        bench.run(req)
        bench.run(req)  # warm: the first run on a device builds kernels
        marks.clear()
        bench.run(req)
    finally:
        bench.engine.emit = emit
    clock.settle()
    timer = RunTimer()
    record = None
    for ev, _ in marks:
        if isinstance(ev, RunStarted):
            record = timer.started(ev)
        elif isinstance(ev, Step):
            timer.step(ev)
    if record is None or len(marks) < 3:
        raise Failed(f"{len(marks)} events marked: no run")
    ttft, ttft_r = agree(record.total.ttft_s * 1e3, clock.ms(marks[0][1], marks[1][1]), 0.1, 0.2, " ms", "TTFT")
    # A step's interval on the reference clock spans its own dt plus the host's work between steps (events, bookkeeping).
    gaps = [clock.ms(a[1], b[1]) for a, b in itertools.pairwise(marks[1:]) if isinstance(b[0], Step) and b[0].kind == "decode"]
    itl = [s * 1e3 for s in record.total.itl_s]
    p50, p50_ref = agree(percentile(itl, 50), percentile(gaps, 50), 0.1, 0.2, " ms", "ITL p50")
    span = (marks[-1][0].t_ns - marks[1][0].t_ns) / 1e6
    span_f, span_ref = agree(span, clock.ms(marks[1][1], marks[-1][1]), 0.02, 0.2, " ms", "host clock over the run")
    return f"TTFT {ttft}, ITL p50 {p50}, run {span_f}", f"{clock.name}: TTFT {ttft_r}, ITL p50 {p50_ref}, run {span_ref}"


def check_syncs(bench: Bench, combo: dict, req) -> tuple[str, str]:
    from monitors.host_reads import count_host_reads
    from tui_app.commands.bench import apply_levers

    refused = apply_levers(bench.engine, combo)
    if refused:
        apply_levers(bench.engine, {})
        raise Skip(f"refused: {refused}")
    try:
        bench.run(req)  # warm: a first run may compile or build
        with count_host_reads(cuda=bench.engine.device.startswith("cuda")) as n:
            tokens, _ = bench.run(req)
    finally:
        apply_levers(bench.engine, {})
    reads, syncs = n.per_token(len(tokens))
    reference = f"{reads:.2f} host reads/token (the CPU's count), target ≤ 1"
    if syncs is None:  # off CUDA: the host reads are what each would be a sync on a GPU
        figure = f"{reads:.2f} host reads/token, no CUDA here"
        if reads > 1:
            raise Failed("more than one host read per token", figure, "target ≤ 1")
        return figure, "target ≤ 1"
    figure = f"{syncs:.2f} CUDA syncs/token"
    if syncs > 1:
        raise Failed("more than one CUDA sync per token", figure, reference)
    return figure, reference


def copy_bandwidth(device: str, nbytes: int = 2**30, repeats: int = 20) -> float:
    """Bytes read + written per second by a device-to-device copy: the memory bus's practical peak."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    clock = Clock(device)
    clock.settle()
    start = clock.mark()
    for _ in range(repeats):
        dst.copy_(src)
    end = clock.mark()
    clock.settle()
    return 2 * nbytes * repeats / (clock.ms(start, end) / 1e3)


def check_bandwidth(folder: Path, device: str, levers: dict, dtype: str = "bf16", copy_bytes: int = 2**30) -> tuple[str, str]:
    """Decode reads every weight once per token: weight bytes × tokens/s is the bandwidth achieved."""
    from tui_app.commands.bench import apply_levers
    from tui_app.core.session import Session
    from tui_app.engine import bandwidth
    from tui_app.engine.config import RunRequest

    bench = Bench(folder, device, dtype)
    refused = apply_levers(bench.engine, levers)
    if refused:
        raise Skip(f"refused: {refused}")
    req = RunRequest(preset="short", max_new_tokens=64, ignore_eos=True)
    bench.engine.request_probe()  # the app's own measurement (Bandwidth), taken in the next run
    bench.run(req)
    warm = list(bench.events)
    _, events = bench.run(req)
    tps = _decode_tps(events)
    weights = bandwidth.weight_bytes(bench.engine._variants[bench.engine.levers.quant])  # as the app counts them
    achieved = weights * tps
    session = Session()  # the app's `mem bw`, as the status line shows it
    for ev in warm + events:
        session.feed(ev)
    live = session.read_rate()
    del bench
    gc.collect()  # the next model needs this one's memory back
    Clock(device).settle()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    peak = copy_bandwidth(device, copy_bytes)
    figure = f"{achieved / 1e9:.4g} GB/s = {achieved / peak:.1%} of the copy ({tps:.1f} tok/s × {weights / 1e9:.4g} GB of weights)"
    if live is not None:
        figure += f"; the app's mem bw {live[1]:.2f} of its in-place read ({session.bandwidth.read_bps / 1e9:.4g} GB/s)"
    else:
        figure += "; the app's mem bw: none (no run of weights of 1 MiB or more to read)"
    reference = f"device-to-device copy {peak / 1e9:.4g} GB/s (read + written), same run"
    if weights >= 256 * MiB and achieved > 1.1 * peak:  # far above any cache: every byte comes from memory
        raise Failed("weights read faster than a copy moves bytes: the count or the timing is wrong", figure, reference)
    if live is not None and live[1] > 1.1:
        raise Failed("the app's mem bw is above its own reference: the probe is wrong on this device", figure, reference)
    return figure, reference


def check_device_map(folder: Path, device: str, limits: dict, dtype: str = "bf16") -> tuple[str, str]:
    """--device-map auto with `limits` (accelerate's max_memory) small enough that the model is
    placed over two devices (or offloaded to disk): the same greedy tokens as the model on one,
    every weight byte placed once, and the allocator's figures summed over the GPUs it uses."""
    import torch

    from monitors.events import Step, TorchMemory
    from tui_app.core import fmt
    from tui_app.engine.config import RunRequest

    req = RunRequest(preset="short", max_new_tokens=16, ignore_eos=True)
    one = Bench(folder, device, dtype)
    plain, events = one.run(req)
    one_tps = _decode_tps(events)
    placed = Bench(folder, device, dtype, device_map="auto", max_memory=limits)
    ready = placed.engine.ready
    if not placed.engine.split:
        raise Failed(f"not split: {ready.placement}", reference=f"max_memory {limits}")
    if sum(ready.placement.values()) != ready.weight_bytes:
        raise Failed(f"placed {sum(ready.placement.values())} bytes of {ready.weight_bytes}", fmt.where(ready))
    tokens, events = placed.run(req)
    if device.startswith("cuda") and not any(isinstance(e, TorchMemory) for e in events):
        raise Failed("no allocator figures from the placed model", fmt.where(ready))
    i = first_difference(plain, tokens)
    gap, scale = (None, 0.0) if i is None or i >= min(len(plain), len(tokens)) else one.logit_gap(req, plain, i, tokens[i])
    tolerance = near_tie_tolerance(torch.finfo(one.engine.dtype).eps, scale)
    figure, reference = judge_greedy(plain, tokens, True, (lambda _: gap) if gap is not None else None, tolerance)
    del one, placed
    gc.collect()
    steps = sum(1 for e in events if isinstance(e, Step))
    return f"{fmt.where(ready)}: {figure}, {_decode_tps(events):.1f} tok/s ({steps} steps)", f"{reference} on {device} alone, {one_tps:.1f} tok/s"


def _decode_tps(events) -> float:
    from monitors.events import Step

    decode = [e for e in events if isinstance(e, Step) and e.kind == "decode"]
    return sum(e.n_tokens for e in decode) / max(sum(e.dt_ns for e in decode) / 1e9, 1e-9)


def check_tui(folder: Path, device: str, out: Path, size: tuple[int, int] = (160, 45)) -> tuple[str, str]:
    """The app itself on the GPU (Textual's test driver, the engine in its own process as always):
    a run, then int8 switched on and a second run; its panes must show the GPU's own figures, and
    its screen is saved as an SVG beside the report."""
    import asyncio

    from monitors.sampler import Sampler
    from tui_app.commands.run import engine_source
    from tui_app.engine.config import EngineConfig, RunRequest
    from tui_app.ui.app import TokentopApp

    async def drive() -> tuple[TokentopApp, Path, dict[str, str]]:
        source = engine_source(EngineConfig(model=str(folder), device=device, dtype="bf16"))
        app = TokentopApp(source, RunRequest(max_new_tokens=200, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            for runs, keys in ((1, ("w", "r")), (2, ())):
                for _ in range(1800):
                    if len(app.session.finished_ids) >= runs or app.session.fatal:
                        break
                    await pilot.pause(0.1)
                if app.session.fatal or len(app.session.finished_ids) < runs:
                    raise Failed(f"run {runs} never finished: {app.session.fatal or 'timed out after 180 s'}")
                await pilot.press(*keys)
            await pilot.pause(1.0)
            svg = Path(app.save_screenshot(filename=f"tokentop-gpu-{size[0]}x{size[1]}.svg", path=str(out)))
            shown = {"util": str(app.query_one("UtilChart").border_subtitle), "memory": str(app.query_one("MemoryChart").border_subtitle)}
            await pilot.press("q")
        return app, svg, shown

    app, svg, shown = asyncio.run(drive())
    last = app.session.samples[-1]
    wanted = {"util": ("GPU", "MHz", " W"), "memory": ("GPU", "engine", "device")}
    missing = [f"{pane}: {w!r}" for pane, words in wanted.items() for w in words if w not in shown[pane]]
    figure = f"{shown['util']} | {shown['memory']}"
    if last.gpus is None or last.gpu_proc_mem in (None, 0) or not app.session.torch_mem:
        raise Failed("the panes lack the GPU's figures (NVML per GPU, the engine's process memory, torch's allocator)", figure)
    if missing:
        raise Failed(f"not shown: {', '.join(missing)}", figure)
    return one_line(figure, 400), f"the panes after two runs, NVML and torch's figures present; screen in {svg.name}"


def check_observer_overhead(report: Report, folder: Path, timeout: float, device: str = "cuda", rounds: int = 3, tokens: int = 256) -> tuple[str, str]:
    """benchmarks/observer_overhead.py on the GPU: the full TUI drawing in a real (tmux) terminal."""
    if shutil.which("tmux") is None:
        raise Skip("no tmux here (make gpu-wheels carries one in .gpu-wheels/bin)")
    cmd = [sys.executable, "benchmarks/observer_overhead.py", "--model", str(folder), "--device", device, "--dtype", "bf16"]
    cmd += ["--rounds", str(rounds), "--runs", "3", "--tokens", str(tokens)]
    rc, out = run_logged(report, f"observer overhead on {device}", cmd, timeout)
    if rc:
        raise Failed(f"exited {rc} (log in the report)")
    ratio = re.search(r"\| ratio TUI ÷ alone[^|]*\| ([\d.]+) \(([\d.]+)–([\d.]+)\)", out)
    cpu = re.search(r"\| UI process CPU[^|]*\| ([\d.]+) \|", out)
    if ratio is None or cpu is None:
        raise Failed("no result table in its output (log in the report)")
    figure = f"TUI ÷ alone {ratio.group(1)} ({ratio.group(2)}–{ratio.group(3)}), UI CPU {cpu.group(1)} % of a core"
    reference = "the same engine process without the UI, interleaved rounds; targets ≥ 0.97 and ≤ 10 %"
    if float(ratio.group(1)) < 0.97 or float(cpu.group(1)) > 10:
        raise Failed("outside the target", figure, reference)
    return figure, reference


def make_model(folder: Path, tok: Path, device: str, overrides: dict | None = None) -> tuple[str, str]:
    random_llama(folder, tok, device, overrides)
    gb = sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 1e9
    return f"{gb:.2f} GB of bf16 weights", f"the default model's config{' with ' + str(overrides) if overrides else ''}, its tokenizer"


def check_real_weights(device: str) -> tuple[str, str]:
    """Perplexity of the reference text under each quant level: meaningful on real weights only."""
    from tui_app.commands.bench import apply_levers
    from tui_app.engine.models import ModelError, find_default_gguf

    try:
        find_default_gguf()
    except ModelError as exc:
        raise Skip(f"needs real weights: the default model is not installed here ({exc})") from None
    bench = Bench(Path("default"), device, "bf16")
    figures = {}
    for level in ("off", "int8", "int4"):
        refused = apply_levers(bench.engine, {"quant": level})
        figures[level] = bench.engine.perplexity(level) if not refused else None
    apply_levers(bench.engine, {})
    off = figures["off"] or float("nan")
    for level in ("int8", "int4"):
        value = figures[level]
        if value is not None and value > off * 1.1:
            raise Failed(f"{level} perplexity more than 10 % above plain", f"{level} {value:.2f}", f"plain {off:.2f}")
    return ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} refused" for k, v in figures.items()), "perplexity of the reference text, plain bf16 (≤ +10 %)"


def run_logged(report: Report, title: str, cmd: list[str], timeout: float) -> tuple[int, str]:
    if timeout < 10:
        raise Skip("too little of the time budget left")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        report.logs[title] = out[-20000:]
        raise Failed(f"timed out after {timeout:.0f} s") from None
    report.logs[title] = (proc.stdout + proc.stderr)[-20000:]
    return proc.returncode, proc.stdout + proc.stderr


def pytest_summary(text: str) -> str:
    """pytest -q's last line: '3 passed, 2 skipped in 4.1s'."""
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|error|errors|deselected|xfailed).*?)\s*=*$", text, re.M)
    return found[-1] if found else one_line(text.strip().splitlines()[-1] if text.strip() else "no output")


def check_pytest(report: Report, title: str, args: list[str], timeout: float) -> tuple[str, str]:
    rc, out = run_logged(report, title, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], timeout)
    summary = pytest_summary(out)
    if rc not in (0, 5):  # 5: nothing collected, said in the summary
        raise Failed(f"pytest exited {rc} (log in the report)", summary)
    return summary, "pytest " + " ".join(args)


def check_framework_overhead(report: Report, tok: Path, timeout: float) -> tuple[str, str]:
    cmd = [sys.executable, "benchmarks/framework_overhead.py", "--device", "cuda", "--repeats", "10", "--tokenizer", str(tok)]
    rc, out = run_logged(report, "framework overhead on CUDA", cmd, timeout)
    if rc:
        raise Failed(f"exited {rc} (log in the report)")
    rows = [line for line in out.splitlines() if line.startswith("| engine")]
    return one_line("; ".join(rows), 400), "model.generate on the same tiny Llama, same run"


# ---------------------------------------------------------------- the run


def header(device: str) -> list[str]:
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    props = torch.cuda.get_device_properties(device)
    return [
        f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}",
        f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs; torch {torch.__version__}, CUDA {torch.version.cuda}",
        f"Python {platform.python_version()}, transformers {importlib.metadata.version('transformers')}",
        "models: random weights from the default model's config and tokenizer; real weights only where the default model is installed",
    ]


def run_all(report: Report, device: str, tok: Path, work: Path, small_overrides: dict | None = None) -> None:
    """Every check in order, cheap and essential first. Models are made when a check first needs
    one (so --only runs what it names), each once; `small_overrides` shrink the lever model (tests)."""
    from tui_app.engine.config import RunRequest

    report.check("pytest -m gpu --device cuda", lambda: check_pytest(report, "pytest -m gpu", ["-m", "gpu", "--device", "cuda"], min(180, report.left_s())))
    report.check("torch allocated/reserved vs memory_stats", lambda: check_torch_memory(device))
    report.check("NVML process memory vs nvidia-smi --query-compute-apps", lambda: check_nvml_process(device))
    report.check("NVML device memory vs nvidia-smi --query-gpu", lambda: check_nvml_device(device))
    report.check("NVML util/power/clock under load vs nvidia-smi", lambda: check_nvml_load(device))
    report.check("quality on real weights (perplexity, int8/int4)", lambda: check_real_weights(device))

    made: dict[str, Path | str] = {}

    def model(key: str, overrides: dict | None) -> Path:
        if key not in made:
            try:
                figure, reference = make_model(work / key, tok, device, overrides)
            except Exception as exc:
                made[key] = one_line(f"{type(exc).__name__}: {exc}")
                raise
            made[key] = work / key
            report.header.append(f"model {key}: {figure}, from {reference}")
        found = made[key]
        if isinstance(found, str):
            raise Skip(f"no model: making {key} failed ({found})")
        return found

    benches: dict[str, Bench] = {}

    def bench(dtype: str) -> Bench:
        if dtype not in benches:
            benches[dtype] = Bench(model("default-arch", small_overrides), device, dtype)
        return benches[dtype]

    req = RunRequest(preset="short", max_new_tokens=NEW_TOKENS, ignore_eos=True)
    report.check("TTFT/ITL vs CUDA events (bf16)", lambda: check_timing(bench("bf16"), req))
    n_singles = sum(len(v) for v in LEVER_GROUPS.values())
    singles, pairs = lever_cases()[:n_singles], lever_cases()[n_singles:]
    for name, combo in [("plain", {}), *singles]:
        report.check(f"syncs per token: {name} (bf16)", lambda c=combo: check_syncs(bench("bf16"), c, req))
    for dtype in ("bf16", "fp16"):
        for name, combo in singles:
            report.check(f"lever {name} ({dtype})", lambda c=combo, d=dtype: lever_check(bench(d), c, req))
    short = RunRequest(preset="short", max_new_tokens=8, ignore_eos=True)
    for name, combo in (("plain", {}), ("compile", {"compile": True})):
        report.check(f"GPU leak: 100 clean runs, {name} (bf16)", lambda c=combo: check_device_leak(bench("bf16"), c, short, 100))
    report.check("GPU leak: 1 MB/run kept on the device, 20 runs (bf16)", lambda: check_device_leak(bench("bf16"), {}, short, 20, leak_mb=1.0))
    report.check("bandwidth ~1B bf16 plain", lambda: check_bandwidth(model("llama-1b", BIG), device, {}))
    report.check("bandwidth ~1B bf16 compile", lambda: check_bandwidth(model("llama-1b", BIG), device, {"compile": True}))
    report.check("framework overhead on CUDA", lambda: check_framework_overhead(report, tok, min(240, report.left_s())))
    limits = {int(device.partition(":")[2] or 0): "1GiB", "cpu": "64GiB"}
    report.check("--device-map auto: ~1B over the GPU and CPU", lambda: check_device_map(model("llama-1b", BIG), device, limits))
    report.check("TUI on the GPU: panes and a screenshot", lambda: check_tui(model("default-arch", small_overrides), device, report.path.parent))
    report.check("observer overhead, TUI in tmux", lambda: check_observer_overhead(report, model("default-arch", small_overrides), min(300, report.left_s())))
    report.check(
        "suite --device cuda",
        lambda: check_pytest(report, "suite --device cuda", ["--device", "cuda", "-m", "not vllm and not browser and not gpu"], min(240, report.left_s())),
    )
    for dtype in ("bf16", "fp16"):
        for name, combo in pairs:
            report.check(f"lever {name} ({dtype})", lambda c=combo, d=dtype: lever_check(bench(d), c, req))


def carry_tmux(dest: Path) -> None:
    """This machine's tmux and the libraries the lent machine's image lacks for it, behind a
    wrapper in dest/bin: the observer-overhead check draws the TUI in a real terminal."""
    found = shutil.which("tmux")
    if found is None:
        print("tmux: not on this machine, not carried (the observer-overhead check will say SKIP)")
        return
    folder = dest / "tmux"
    folder.mkdir(exist_ok=True)
    shutil.copy2(found, folder / "tmux")
    libs = subprocess.run(["ldd", found], capture_output=True, text=True, check=True).stdout
    for name in TMUX_LIBS:
        path = re.search(rf"{re.escape(name)}\S* => (\S+)", libs)
        if path:
            shutil.copy2(path.group(1), folder / Path(path.group(1)).name)
    wrapper = dest / "bin" / "tmux"
    wrapper.parent.mkdir(exist_ok=True)
    script = [
        "#!/bin/sh",
        'here="$(dirname "$(readlink -f "$0")")/../tmux"',
        'LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/tmux" "$@"',
    ]
    wrapper.write_text("\n".join(script) + "\n")
    wrapper.chmod(0o755)


def build_wheels(dest: Path, python_version: str = "3.12") -> int:
    """Here, with network: the wheels the lent machine lacks, and the default model's tokenizer."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = []
    for name in CARRIED:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{name}: not in this venv, not carried (nothing here needs it)")
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", f"--python-version={python_version}", "--implementation=cp"]
    cmd += platforms
    subprocess.run([*cmd, "-d", str(dest), TORCHAO, *pins], check=True)
    save_tokenizer(dest / TOKENIZER)
    carry_tmux(dest)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {len(list(dest.glob('*.whl')))} wheels and the tokenizer, {size / MiB:.1f} MiB of the {CARRY_LIMIT // MiB} MiB that travel")
    return 0 if size <= CARRY_LIMIT else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "out"), help="folder for gpu-check.md (default $OUT)")
    ap.add_argument("--budget-s", type=float, default=420, help="checks that would start after this many seconds say SKIP instead")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this text")
    ap.add_argument("--start-at", default="", help="skip the checks before the first whose name contains this text")
    ap.add_argument("--tokenizer", default=None, help="the default model's tokenizer folder (default: the carried one, else the converted default)")
    ap.add_argument("--wheels", default=None, metavar="DIR", help="build the folder that travels to the GPU machine, then exit")
    args = ap.parse_args(argv)
    if args.wheels:
        return build_wheels(Path(args.wheels))
    try:
        import torch
    except ImportError:
        print("gpu-check: no torch in this Python: run it where torch and CUDA are")
        return 2
    if not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__}): nothing to check; run it on a GPU machine (docs/gpu.md)")
        return 2
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = f"cuda:{torch.cuda.current_device()}"
    tok = tokenizer_dir(args.tokenizer)
    os.environ["TOKENTOP_TOKENIZER"] = str(tok)  # for the tests and benchmarks run from here: no default model there
    report = Report(Path(args.out) / "gpu-check.md", header(device), args.budget_s, args.only, start_at=args.start_at)
    print(f"gpu-check: {report.header[1]}; report {report.path}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tokentop-gpu-") as work, contextlib.suppress(KeyboardInterrupt):
        run_all(report, device, tok, Path(work))
    report.write()
    counts = report.counts()
    print(f"gpu-check: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP; report {report.path}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
