"""The torch devices the engine runs on, and what each can do, in one place: `--device auto`'s
choice (cuda, ROCm's included, then xpu, then mps, then cpu), the model line's backend, the sync,
cache and memory calls, a step's timing events and the profiler's view of its kernels, and the
table of levers (and the anatomy) a device cannot do, with the reason.

Sync, caches and allocator figures go through torch.accelerator where this torch has its memory
calls, else each backend's own; a step's device time through torch.Event. ROCm's torch runs AMD
GPUs as `cuda` (torch.version.hip tells them apart); Intel GPUs are `xpu` (torch ≥ 2.5), Apple's
`mps`. Only CPU and (on a lent machine) CUDA run here: the others are held by tests with torch's
backends patched (tests/engine/test_devices.py), and said so in docs/gpu.md."""

from __future__ import annotations

from types import ModuleType

from monitors.torch_memory import accelerator

KINDS = ("cuda", "xpu", "mps", "cpu")  # --device auto's order
MPS_COMPILE = (2, 8)  # torch.compile on MPS before this fails on most models (inductor's Metal backend)


class DeviceError(Exception):
    """A --device this machine's torch cannot run; the message is the one line the user sees."""


def kind(device: str) -> str:
    return device.split(":")[0]


def count(torch: ModuleType, name: str) -> int:
    """How many devices of a kind this torch sees (0 where its build has no such backend)."""
    if name == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "xpu":
        xpu = getattr(torch, "xpu", None)
        return xpu.device_count() if xpu is not None and xpu.is_available() else 0
    if name == "mps":
        return 1 if torch.backends.mps.is_available() else 0
    return 1


def resolve(device: str, torch: ModuleType) -> str:
    if device == "auto":
        found = next(name for name in KINDS if count(torch, name))
        return found if found in ("cpu", "mps") else f"{found}:0"
    name, _, index = device.partition(":")
    if name not in KINDS or (index and not index.isdigit()) or (name in ("cpu", "mps") and index):
        raise DeviceError(f"--device {device!r}: expected auto, cpu, cuda[:N], xpu[:N] or mps")
    if name == "cpu":
        return "cpu"
    n = count(torch, name)
    if not n:
        what = {"cuda": "CUDA (or ROCm)", "xpu": "Intel XPU", "mps": "Apple MPS"}[name]
        raise DeviceError(f"--device {device}: no {what} device is available here (torch {torch.__version__}); use --device cpu")
    if name == "mps":
        return "mps"
    if int(index or 0) >= n:
        raise DeviceError(f"--device {device}: only {n} {name.upper()} device(s) here")
    return f"{name}:{int(index or 0)}"


def backend(device: str, torch: ModuleType) -> str:
    """As the model line names it: "ROCm 6.4", "CUDA 12.8", "XPU", "Metal"; "" on the CPU."""
    name = kind(device)
    if name == "cuda":
        hip = getattr(torch.version, "hip", None)
        return f"ROCm {'.'.join(hip.split('.')[:2])}" if hip else f"CUDA {torch.version.cuda}"
    return {"xpu": "XPU", "mps": "Metal"}.get(name, "")


def module(device: str, torch: ModuleType):
    """The device's sync, memory and cache calls: torch.accelerator where this torch has them for
    this device (torch_memory.accelerator), else torch.cuda, torch.xpu or torch.mps."""
    return accelerator(device, torch) or getattr(torch, kind(device))


def synchronize(device: str, torch: ModuleType) -> None:
    if kind(device) == "cpu":
        return
    acc = accelerator(device, torch)
    if acc is not None:
        acc.synchronize(device)
    else:
        getattr(torch, kind(device)).synchronize()  # torch.mps's takes no device


def make_current(device: str, torch: ModuleType) -> None:
    """The engine's GPU made this thread's current one: a stream, an event's record, CUDA graphs'
    capture, torch.compile's kernels and `--dtype auto`'s bf16 check take the current device, not
    the tensors', so on `--device cuda:1` a step's events would time device 0's stream, where
    nothing of it runs."""
    if kind(device) not in ("cuda", "xpu"):
        return
    index = int(device.partition(":")[2] or 0)
    acc = accelerator(device, torch)
    if acc is not None:
        acc.set_device_index(index)
    else:
        getattr(torch, kind(device)).set_device(index)


def reset_peak(device: str, torch: ModuleType) -> None:
    """The allocator's peak restarted for a run (MPS keeps none: its figures are current ones)."""
    if kind(device) in ("cuda", "xpu"):
        module(device, torch).reset_peak_memory_stats(device)


def empty_cache(device: str, torch: ModuleType) -> None:
    if kind(device) != "cpu":
        module(device, torch).empty_cache()


def timing_events(device: str, torch: ModuleType):
    """Two events that time the device's own work between them (a forward's, where the host sees
    only its launches): torch.Event, the accelerator's (every torch this runs on has it: 2.13 here,
    2.11 on the lent GPU machine). Tried once on the device: a backend whose events do not time
    gives None, and the step's time is the host's. None on the CPU, whose work the host's clock
    sees whole."""
    if kind(device) == "cpu":
        return None
    start, end = (torch.Event(device=kind(device), enable_timing=True) for _ in range(2))
    try:
        start.record()
        end.record()
        end.synchronize()
        start.elapsed_time(end)
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    return start, end


def profiler_kernels(device: str, torch: ModuleType):
    """(torch.profiler's activity for this device's kernels, the DeviceType they come back as), or
    None where the profiler sees none: the CPU (its ops are its work), MPS (torch.profiler has no
    Metal activity), an XPU torch built without Kineto's PTI. ROCm's kernels come back as CUDA's."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    name = kind(device)
    if name == "cuda":
        return ProfilerActivity.CUDA, DeviceType.CUDA
    if name == "xpu" and ProfilerActivity.XPU in torch.profiler.supported_activities():
        return ProfilerActivity.XPU, DeviceType.XPU
    return None


def compile_mode(device: str) -> str:
    """CUDA graphs (one launch a step) where they exist: CUDA and ROCm's HIP graphs, as `cuda`."""
    return "reduce-overhead" if kind(device) == "cuda" else "default"


def refusal(device: str, lever: str, value, torch: ModuleType) -> str | None:
    """Why this device cannot do a lever's value, or None: the one table of them (the reason
    alone; the caller names the lever and the device)."""
    name = kind(device)
    if lever == "compile" and value and name == "mps":
        have = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        if have < MPS_COMPILE:
            return f"needs torch {'.'.join(map(str, MPS_COMPILE))} or later (inductor's Metal backend); this torch is {torch.__version__}"
    if lever == "anatomy" and name in ("xpu", "mps") and profiler_kernels(device, torch) is None:
        where = "Instruments' Metal trace has them (torch.mps.profiler)" if name == "mps" else "this torch was built without Kineto's XPU (PTI) support"
        return f"torch.profiler sees no {name.upper()} kernels here, so a step's parts would be its launches: {where}"
    if lever == "quant" and value == "int4" and name in ("xpu", "mps"):
        return f"no int4 weight-only kernel for {name} in torch or torchao; int8 runs (torchao's)"
    return None
