"""Every check in order, and the command line (`python -m benchmarks.gpu_check`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_check import BIG, LEVER_GROUPS, NEW_TOKENS, ROOT
from benchmarks.gpu_check.anatomy import check_anatomy
from benchmarks.gpu_check.checks import (
    check_bandwidth,
    check_device_map,
    check_framework_overhead,
    check_nvml_device,
    check_nvml_load,
    check_nvml_process,
    check_observer_overhead,
    check_pytest,
    check_real_weights,
    check_tui,
    make_model,
)
from benchmarks.gpu_check.counters import check_gpm_and_clock_events
from benchmarks.gpu_check.experts import check_moe_routing
from benchmarks.gpu_check.memory import check_cuda_snapshot, check_device_calls, check_torch_memory
from benchmarks.gpu_check.models import Bench, check_device_leak, lever_check, tokenizer_dir
from benchmarks.gpu_check.report import Report, Skip, lever_cases, one_line
from benchmarks.gpu_check.steps import check_syncs, check_timing
from benchmarks.gpu_check.wheels import build_wheels


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
    from tui_app.requests import RunRequest

    report.check("pytest -m gpu --device cuda", lambda: check_pytest(report, "pytest -m gpu", ["-m", "gpu", "--device", "cuda"], min(180, report.left_s())))
    report.check("torch allocated/reserved vs memory_stats", lambda: check_torch_memory(device))
    report.check("device calls via torch.accelerator, the step's GPU clock vs CUDA events", lambda: check_device_calls(device))
    report.check("NVML process memory vs nvidia-smi --query-compute-apps", lambda: check_nvml_process(device))
    report.check("NVML device memory vs nvidia-smi --query-gpu", lambda: check_nvml_device(device))
    report.check("NVML util/power/clock under load vs nvidia-smi", lambda: check_nvml_load(device))
    report.check("NVML GPM and clock events under load", lambda: check_gpm_and_clock_events(device))
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
    report.check("anatomy of a step: GPU time by part vs the trace's kernels (bf16)", lambda: check_anatomy(bench("bf16"), req))
    n_singles = sum(len(v) for v in LEVER_GROUPS.values())
    singles, pairs = lever_cases()[:n_singles], lever_cases()[n_singles:]
    for name, combo in [("plain", {}), *singles]:
        report.check(f"syncs per token: {name} (bf16)", lambda c=combo: check_syncs(bench("bf16"), c, req))
    report.check("syncs per token: confidence measured (bf16)", lambda: check_syncs(bench("bf16"), {}, req, confidence=True))
    report.check("MoE routing: counts vs each router's top-k, no sync added (bf16)", lambda: check_moe_routing(work / "moe", tok, device))
    for dtype in ("bf16", "fp16"):
        for name, combo in singles:
            report.check(f"lever {name} ({dtype})", lambda c=combo, d=dtype: lever_check(bench(d), c, req))
    short = RunRequest(preset="short", max_new_tokens=8, ignore_eos=True)
    for name, combo in (("plain", {}), ("compile", {"compile": True})):
        report.check(f"GPU leak: 100 clean runs, {name} (bf16)", lambda c=combo: check_device_leak(bench("bf16"), c, short, 100))
    report.check("GPU leak: 1 MB/run kept on the device, 20 runs (bf16)", lambda: check_device_leak(bench("bf16"), {}, short, 20, leak_mb=1.0))
    report.check("leakcheck --cuda-snapshot: the demo leak in memory_viz's trace", lambda: check_cuda_snapshot(model("default-arch", small_overrides), device))
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "out"), help="folder for gpu-check.md (default $OUT)")
    ap.add_argument("--budget-s", type=float, default=420, help="checks that would start after this many seconds say SKIP instead")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this text (or one of several, A|B|C)")
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
