"""The checks that need CUDA: the instruments against nvidia-smi and CUDA's own counts, the bandwidth, --device-map, the TUI."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.gpu_check import ROOT, MiB
from benchmarks.gpu_check.models import Bench, random_llama
from benchmarks.gpu_check.report import Failed, Report, Skip, agree, first_difference, judge_greedy, near_tie_tolerance, one_line, parse_csv, pytest_summary
from benchmarks.gpu_check.steps import Clock
from tui_app.core import readings


def smi(*args: str) -> list[list[str]]:
    if shutil.which("nvidia-smi") is None:
        raise Skip("nvidia-smi is not on the PATH")
    out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True).stdout
    return parse_csv(out)


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
    """Through the layer the panes read (monitors/gpus.py, NVML chosen over the sysfs probes) and
    through `tokentop probe`'s report: the same figures as nvidia-smi's."""
    import torch

    from monitors.gpus import gpu_reader
    from monitors.probe import dump, probe

    reader = gpu_reader()
    reading = reader.read()
    rows = smi("--query-gpu=index,memory.used,memory.total")
    reader.close()
    if not reading.available or reader.name != "NVML":
        raise Failed(f"the panes read {reader.name}, not NVML: {reading.reason}")
    if len(rows) != len(reading.gpus):
        raise Failed(f"NVML lists {len(reading.gpus)} GPUs, nvidia-smi {len(rows)}")
    i = torch.cuda.current_device()
    g, row = reading.gpus[i], rows[i]
    used, used_ref = agree((g.mem_used or 0) / MiB, float(row[1]), 0, 64, " MiB", "device memory used")
    total, total_ref = agree((g.mem_total or 0) / MiB, float(row[2]), 0, 1, " MiB", "device memory total")
    nvml = probe(interval_s=0.1)["gpus"][0]
    probed = nvml["devices"][i]["fields"]["mem_total"]["value"] if nvml["ok"] else None
    agree((probed or 0) / MiB, float(row[2]), 0, 1, " MiB", "tokentop probe's device memory total")
    with tempfile.TemporaryDirectory() as folder:  # --dump writes NVML's figures, --root reads them back
        dump("/", Path(folder) / "d", frozenset())
        back = probe(Path(folder) / "d")["gpus"][0]
    dumped = back["devices"][i]["fields"]["mem_total"]["value"] if back["ok"] else None
    agree((dumped or 0) / MiB, float(row[2]), 0, 1, " MiB", f"probe --dump's device memory total ({back['reason'] or 'read back'})")
    return f"used {used}, total {total}", f"nvidia-smi --query-gpu used {used_ref}, total {total_ref}"


@contextlib.contextmanager
def matmul_load(device: str):
    """A bf16 8192² matrix-product loop on the GPU (tensor cores) while the block runs, from 1 s in."""
    import torch

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
        time.sleep(1.0)
        yield
    finally:
        stop.set()
        worker.join()


def check_nvml_load(device: str) -> tuple[str, str]:
    """Utilization and power under a matrix-product load, read by NVML and by nvidia-smi one after the other."""
    import torch

    from monitors.gpu import NvmlReader

    with matmul_load(device):
        time.sleep(1.0)
        reader = NvmlReader()
        g = reader.read().gpus[torch.cuda.current_device()]
        row = smi("--query-gpu=utilization.gpu,power.draw,clocks.sm")[torch.cuda.current_device()]
        reader.close()
    util, util_ref = agree(g.sm_util or 0.0, float(row[0]), 0, 15, " %", "SM utilization")
    if (g.sm_util or 0) < 50:
        raise Failed("SM utilization under a matrix-product load below 50 %", util, util_ref)
    power, power_ref = ("n/a", row[1]) if g.power_w is None or not row[1].replace(".", "").isdigit() else agree(g.power_w, float(row[1]), 0.2, 0, " W", "power")
    clock, clock_ref = agree(float(g.sm_clock_mhz or 0), float(row[2]), 0.1, 0, " MHz", "SM clock")
    return f"util {util}, power {power}, SM clock {clock}", f"nvidia-smi util {util_ref}, power {power_ref}, clock {clock_ref}"


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
    from tui_app.requests import RunRequest

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
    weights = bandwidth.weight_bytes(bench.engine.control.variants[bench.engine.levers.quant])  # as the app counts them
    achieved = weights * tps
    session = Session()  # the app's `mem bw`, as the status line shows it
    for ev in warm + events:
        session.feed(ev)
    live = readings.read_rate(session)
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
    # The app's reference, a read of the weights in place, should read at least 70 % as fast as a
    # copy reads (half of what it moves): 1013 GB/s against 4204 on the first H200, before foreach.
    if live is not None and device.startswith("cuda") and session.bandwidth.read_bps < 0.7 * peak / 2:
        raise Failed("the app's in-place read is slower than the copy's reads: its mem bw overstates", figure, reference)
    return figure, reference


def check_device_map(folder: Path, device: str, limits: dict, dtype: str = "bf16") -> tuple[str, str]:
    """--device-map auto with `limits` (accelerate's max_memory) small enough that the model is
    placed over two devices (or offloaded to disk): the same greedy tokens as the model on one,
    every weight byte placed once, and the allocator's figures summed over the GPUs it uses."""
    import torch

    from monitors.events import Step, TorchMemory
    from tui_app.core import fmt
    from tui_app.requests import RunRequest

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
    from tui_app.engine.config import EngineConfig
    from tui_app.requests import RunRequest
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
            # Each pane sets its subtitle when it next draws, at its own rate: on a loaded machine
            # more than a second after the run.
            for _ in range(100):
                await pilot.pause(0.1)
                shown = {"util": str(app.query_one("UtilChart").border_subtitle), "memory": str(app.query_one("MemoryChart").border_subtitle)}
                if all(shown.values()):
                    break
            svg = Path(app.save_screenshot(filename=f"tokentop-gpu-{size[0]}x{size[1]}.svg", path=str(out)))
            await pilot.press("q")
        return app, svg, shown

    app, svg, shown = asyncio.run(drive())
    last = app.session.samples[-1]
    # What a 160-column terminal has room for (the device's memory shows from about 180 columns)
    wanted = {"util": ("GPU", "MHz", " W"), "memory": ("GPU engine",)}
    missing = [f"{pane}: {w!r}" for pane, words in wanted.items() for w in words if w not in shown[pane]]
    figure = f"{shown['util']} | {shown['memory']}"
    if last.gpus is None or last.gpu_proc_mem in (None, 0) or not app.session.torch_mem:
        raise Failed("the panes lack the GPU's figures (NVML per GPU, the engine's process memory, torch's allocator)", figure)
    if missing:
        raise Failed(f"not shown: {', '.join(missing)}", figure)
    return one_line(figure, 400), f"the panes after two runs, NVML and torch's figures present; screen in {svg.name}"


def check_observer_overhead(report: Report, folder: Path, timeout: float, device: str = "cuda", quads: int = 40, tokens: int = 4096) -> tuple[str, str]:
    """benchmarks/terminal/observer_overhead.py on the GPU: the full TUI drawing in a real (tmux) terminal."""
    if shutil.which("tmux") is None:
        raise Skip("no tmux here (make gpu-wheels carries one in .gpu-wheels/bin)")
    cmd = [sys.executable, "benchmarks/terminal/observer_overhead.py", "--model", str(folder), "--device", device, "--dtype", "bf16"]
    cmd += ["--quads", str(quads), "--minutes", "0", "--tokens", str(tokens)]
    rc, out = run_logged(report, f"observer overhead on {device}", cmd, timeout)
    if rc:
        raise Failed(f"exited {rc} (log in the report)")
    ratio = re.search(r"\| ratio TUI ÷ alone[^|]*\| ([\d.]+) \(([\d.]+)–([\d.]+)\)", out)
    cpu = re.search(r"\| UI process CPU[^|]*\| ([\d.]+) \|", out)
    if ratio is None or cpu is None:
        raise Failed("no result table in its output (log in the report)")
    figure = f"TUI ÷ alone {ratio.group(1)} ({ratio.group(2)}–{ratio.group(3)}), UI CPU {cpu.group(1)} % of a core"
    reference = "the same engine with its UI stopped, in alternating 1-s windows; targets ≥ 0.98 and ≤ 10 %"
    if float(ratio.group(1)) < 0.98 or float(cpu.group(1)) > 10:
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


def check_pytest(report: Report, title: str, args: list[str], timeout: float) -> tuple[str, str]:
    rc, out = run_logged(report, title, [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *args], timeout)
    summary = pytest_summary(out)
    if rc not in (0, 5):  # 5: nothing collected, said in the summary
        raise Failed(f"pytest exited {rc} (log in the report)", summary)
    return summary, "pytest " + " ".join(args)


def check_framework_overhead(report: Report, tok: Path, timeout: float) -> tuple[str, str]:
    cmd = [sys.executable, "benchmarks/engine/framework_overhead.py", "--device", "cuda", "--repeats", "10", "--tokenizer", str(tok)]
    rc, out = run_logged(report, "framework overhead on CUDA", cmd, timeout)
    if rc:
        raise Failed(f"exited {rc} (log in the report)")
    rows = [line for line in out.splitlines() if line.startswith("| engine")]
    return one_line("; ".join(rows), 400), "model.generate on the same tiny Llama, same run"
