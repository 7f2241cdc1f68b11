"""The engine's devices (tui_app/engine/devices.py) with torch's backends patched, as no Intel or
Apple GPU runs here: --device auto's order, each explicit device's one-line refusal, the model
line's backend, and the one table of levers a device cannot do, as the lever control says it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from monitors.events import Levers
from tui_app.engine import devices
from tui_app.engine import levers as lv
from tui_app.engine.config import EngineConfig
from tui_app.engine.lever_control import LeverControl, Phases
from tui_app.engine.models import ModelError, resolve_device, resolve_dtype


@pytest.fixture
def machine(monkeypatch):
    """Which backends this torch reports: set(cuda=N, xpu=N, mps=bool), the rest off."""

    def have(cuda: int = 0, xpu: int = 0, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.xpu, "is_available", lambda: xpu > 0)
        monkeypatch.setattr(torch.xpu, "device_count", lambda: xpu)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return have


@pytest.mark.parametrize(
    ("found", "chosen"),
    [({"cuda": 1, "xpu": 1, "mps": True}, "cuda:0"), ({"xpu": 2, "mps": True}, "xpu:0"), ({"mps": True}, "mps"), ({}, "cpu")],
)
def test_auto_takes_cuda_then_xpu_then_mps_then_the_cpu(machine, found, chosen):
    machine(**found)
    assert resolve_device("auto") == chosen


@pytest.mark.parametrize(
    ("found", "asked", "said"),
    [
        ({"xpu": 2}, "xpu:1", None),
        ({"xpu": 2}, "xpu:2", "--device xpu:2: only 2 XPU device(s) here"),
        ({}, "xpu", f"--device xpu: no Intel XPU device is available here (torch {torch.__version__}); use --device cpu"),
        ({}, "mps", f"--device mps: no Apple MPS device is available here (torch {torch.__version__}); use --device cpu"),
        ({"mps": True}, "mps:1", "--device 'mps:1': expected auto, cpu, cuda[:N], xpu[:N] or mps"),
        ({}, "tpu", "--device 'tpu': expected auto, cpu, cuda[:N], xpu[:N] or mps"),
    ],
)
def test_each_device_asked_runs_or_is_refused_in_one_line(machine, found, asked, said):
    machine(**found)
    if said is None:
        assert resolve_device(asked) == asked
        return
    with pytest.raises(ModelError) as caught:
        resolve_device(asked)
    assert str(caught.value) == said


def test_the_model_line_names_each_backend_and_the_dtype_follows_the_device(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482-0f2d60242", raising=False)
    assert devices.backend("cuda:0", torch) == "ROCm 6.4"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8", raising=False)
    assert devices.backend("cuda", torch) == "CUDA 12.8"
    assert [devices.backend(d, torch) for d in ("xpu:0", "mps", "cpu")] == ["XPU", "Metal", ""]
    assert (resolve_dtype("auto", "xpu:0"), resolve_dtype("auto", "mps"), resolve_dtype("auto", "cpu")) == (torch.bfloat16, torch.float16, torch.float32)


def control(device: str) -> LeverControl:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    decoder = SimpleNamespace(device=device, split=False)
    return LeverControl(EngineConfig(), lambda ev: None, Phases(lambda ev: None), decoder, model, dtype=torch.float16, n_layers=1, context_len=64)


@pytest.mark.parametrize(
    ("device", "version", "lever", "value", "said"),
    [
        ("mps", "2.7.1", "compile", True, "compile on mps: needs torch 2.8 or later (inductor's Metal backend); this torch is 2.7.1"),
        ("mps", "2.13.0", "compile", True, None),
        ("mps", "2.13.0", "quant", "int4", "int4 on mps: no int4 weight-only kernel for mps in torch or torchao; int8 runs (torchao's)"),
        ("xpu:0", "2.13.0", "quant", "int4", "int4 on xpu:0: no int4 weight-only kernel for xpu in torch or torchao; int8 runs (torchao's)"),
        ("xpu:0", "2.13.0", "quant", "int8", None),
    ],
)
def test_a_lever_the_device_cannot_do_is_refused_with_the_reason(monkeypatch, device, version, lever, value, said):
    monkeypatch.setattr(torch, "__version__", version)
    assert control(device).check_lever(lever, value) == said  # the cache on, as compile needs
    if (lever, value) == ("quant", "int4"):
        assert lv.quant_impl(device, torch.float16)["int4"] == f"refused: {said.split(': ', 1)[1]}"


def test_only_cuda_gets_cuda_graphs():
    assert [devices.compile_mode(d) for d in ("cuda:0", "xpu:0", "mps", "cpu")] == ["reduce-overhead", "default", "default", "default"]


def test_on_mps_the_allocation_the_drivers_and_metals_limit_are_read_and_the_runs_peak_is_its_highest_reading(monkeypatch):
    """torch.mps keeps no peak: the run's 4 Hz readings keep the highest (current_allocated_memory,
    driver_allocated_memory and recommended_max_memory patched, as no Mac runs here)."""
    from tui_app.engine.memory import MemoryWatch

    allocated = iter([300, 900, 500, 400])
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: next(allocated) * 2**20)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 1200 * 2**20)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 10240 * 2**20)
    seen: list = []
    watch = MemoryWatch("mps", seen.append)
    for t in (1, 2, 3):
        watch.tick(t * 300_000_000)
    assert [m.allocated // 2**20 for m in seen] == [300, 900, 500] and seen[0].reserved == 1200 * 2**20
    assert {m.limit for m in seen} == {10240 * 2**20}
    peak, now, reserved, _ = watch.after_run()
    assert (peak // 2**20, now // 2**20, reserved // 2**20) == (900, 400, 1200)


class Calls:
    """A backend's calls, each recording its name and arguments and giving `answer`."""

    def __init__(self, log: list, who: str, answer=0):
        self.log, self.who, self.answer = log, who, answer

    def __getattr__(self, name):
        def call(*args):
            self.log.append((self.who, name, *args))
            return {"num_ooms": 0} if name == "memory_stats" else self.answer

        return call


NAMES = ("synchronize", "reset_peak_memory_stats", "empty_cache", "memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated")


def test_sync_caches_and_the_allocators_figures_go_through_torch_accelerator_where_torch_has_it(monkeypatch):
    """torch.accelerator (2.9 on) for CUDA's and XPU's calls where it runs that kind; torch.xpu's
    own where this torch has no accelerator memory calls; torch.mps's own always (its allocator
    keeps no peak). The backends are patched: no XPU or Mac runs here."""
    from monitors.torch_memory import read_torch_memory

    log: list = []
    acc, xpu, mps = Calls(log, "accelerator", 7), Calls(log, "xpu", 5), Calls(log, "mps", 3)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("xpu"))
    for name in NAMES:
        monkeypatch.setattr(torch.accelerator, name, getattr(acc, name))
        monkeypatch.setattr(torch.xpu, name, getattr(xpu, name))
    for name in ("synchronize", "empty_cache", "current_allocated_memory", "driver_allocated_memory", "recommended_max_memory"):
        monkeypatch.setattr(torch.mps, name, getattr(mps, name))

    def used(device: str) -> set:
        log.clear()
        devices.synchronize(device, torch)
        devices.reset_peak(device, torch)
        devices.empty_cache(device, torch)
        mem = read_torch_memory(device)
        assert mem is not None and mem.allocated == {"accelerator": 7, "xpu": 5, "mps": 3}[log[0][0]]
        return {who for who, *_ in log}

    assert used("xpu:0") == {"accelerator"}
    assert ("accelerator", "synchronize", "xpu:0") in log
    assert used("mps") == {"mps"}
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    assert used("xpu:0") == {"xpu"}  # another kind is this torch's accelerator
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("xpu"))
    monkeypatch.delattr(torch.accelerator, "memory_stats")  # a torch before the accelerator's memory calls
    assert used("xpu:0") == {"xpu"}


def test_the_engines_gpu_is_made_the_current_one_where_its_streams_events_and_graphs_go(monkeypatch):
    """`--device cuda:1`'s events, CUDA graphs and compiled kernels take the current device, not the
    tensors': the engine makes its own current, through torch.accelerator where this torch has it
    for that kind, else the backend's set_device (patched: one GPU at most runs here)."""
    log: list = []
    acc, xpu = Calls(log, "accelerator"), Calls(log, "xpu")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("xpu"))
    monkeypatch.setattr(torch.accelerator, "set_device_index", acc.set_device_index)
    monkeypatch.setattr(torch.xpu, "set_device", xpu.set_device)
    for device in ("cpu", "mps", "xpu:1"):
        devices.make_current(device, torch)
    assert log == [("accelerator", "set_device_index", 1)]
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    devices.make_current("xpu:2", torch)  # another kind is this torch's accelerator
    assert log[-1] == ("xpu", "set_device", 2)


def test_the_anatomy_profiles_each_gpus_kernels_and_is_refused_where_the_profiler_sees_none(monkeypatch):
    """CUDA's (ROCm's as CUDA) and XPU's kernels under torch.profiler; on MPS, and on an XPU torch
    without Kineto's PTI, a step's ops would be its launches: the anatomy is refused, saying why."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    from tui_app.engine.anatomy import anatomy_refusal

    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {ProfilerActivity.CPU, ProfilerActivity.XPU})
    assert devices.profiler_kernels("cuda:0", torch) == (ProfilerActivity.CUDA, DeviceType.CUDA)
    assert devices.profiler_kernels("xpu:0", torch) == (ProfilerActivity.XPU, DeviceType.XPU)
    assert devices.profiler_kernels("cpu", torch) is None and devices.profiler_kernels("mps", torch) is None
    lev = Levers()
    assert anatomy_refusal(lev, busy=False, device="xpu:0") is None and anatomy_refusal(lev, busy=False, device="cpu") is None
    assert "no MPS kernels" in anatomy_refusal(lev, busy=False, device="mps") and "Instruments" in anatomy_refusal(lev, busy=False, device="mps")
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {ProfilerActivity.CPU})
    assert devices.profiler_kernels("xpu:0", torch) is None
    assert "without Kineto's XPU (PTI)" in anatomy_refusal(lev, busy=False, device="xpu:0")


class Event:
    """torch.Event's calls; `elapsed` what elapsed_time gives, or the error it raises."""

    elapsed: float | Exception = 2.5
    made: ClassVar[list] = []

    def __init__(self, device=None, enable_timing=False):
        self.made.append((device, enable_timing))

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        if isinstance(self.elapsed, Exception):
            raise self.elapsed
        return self.elapsed


def test_a_steps_device_time_comes_from_the_accelerators_events_where_they_time_else_the_hosts_clock(monkeypatch):
    """On any accelerator the forward's time is its events' (torch.Event, patched here: no XPU or Mac
    runs here); a backend whose events do not time leaves the host's clock, as the CPU has."""
    from tui_app.engine.decoding import GpuClock

    monkeypatch.setattr(torch, "Event", Event)
    assert GpuClock.on("cpu") is None
    clock = GpuClock.on("xpu:0")
    assert clock is not None and clock.ns() == 2_500_000 and Event.made[-2:] == [("xpu", True)] * 2
    monkeypatch.setattr(Event, "elapsed", RuntimeError("event timing is not supported on this backend"))
    assert GpuClock.on("mps") is None
