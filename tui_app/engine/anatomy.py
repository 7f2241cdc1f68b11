"""The anatomy of a decode step: where its time goes, by part of the model, from torch.profiler.

For a window of decode steps the profiler runs (CPU activity, and the GPU's kernels: CUDA's,
ROCm's, XPU's; where it sees none, on MPS, the anatomy is refused with the reason) and every module
of the model whose name says its part (embedding, attention, MLP, norms, LM head) is wrapped in a
profiler range by a forward hook, registered for the window only: nothing is hooked and no range
is opened outside it. The decoder's own ranges (`Decoder.mark`) name the step, its
forward, the pick of the next token and the host read. A part's time is its ranges' time; what the
step spends outside every part is "framework" (Python between the modules, building inputs). Ops
that run outside any module but are attention's (the attention function a quantized Llama step
calls directly) count as attention.

Under torch.compile, or the fused C++ decode step, the modules are one graph: no hook may be added
(a hook on a compiled module recompiles it) or none fires; the forward is then one part named
after its largest op, beside the framework share.

The window's trace is torch's own Chrome/Perfetto export; Perfetto's UI and chrome://tracing open it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

import torch
from torch.autograd import DeviceType

from monitors.events import Anatomy
from tui_app.engine import devices

_NULL = contextlib.nullcontext()
# Which part a module is, by a component of its qualified name (Llama, Qwen, Mistral, Phi, Gemma,
# GPT-2 and MoE names); the first component that says wins, so a projection inside attention is attention.
_NAMES = {
    "embedding": ("embed_tokens", "wte", "wpe", "embeddings", "embed_in"),
    "attention": ("self_attn", "attn", "attention", "self_attention", "rotary_emb"),
    "mlp": ("mlp", "feed_forward", "block_sparse_moe", "experts", "ffn"),
    "lm_head": ("lm_head", "embed_out"),
}
MODULE_PARTS = ("embedding", "attention", "mlp", "norms", "lm_head")
STEP_PARTS = ("sampling", "host_read")  # the decoder's own ranges after the forward


def no_mark(name: str):
    return _NULL


@contextlib.contextmanager
def _kineto_quiet():
    """Kineto writes a line to stderr as the profiler starts and stops ("USDT: ... profiler_start"),
    whatever KINETO_LOG_LEVEL says: in a headless run it would fall between the run's lines, so
    stderr is closed for those two calls only."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def part_of(name: str) -> str | None:
    for comp in name.split("."):
        for part, names in _NAMES.items():
            if comp in names:
                return part
        if "norm" in comp or comp.startswith("ln_"):
            return "norms"
    return None


def anatomy_refusal(lev, busy: bool, device: str) -> str | None:
    """Why the next decode steps cannot be profiled now, or None."""
    if why := devices.refusal(device, "anatomy", True, torch):
        return why
    if not lev.cache:
        return "without the KV cache every step is a prefill; turn the cache on first"
    if lev.spec != "off":
        return "speculative steps verify several tokens at once; turn speculation off first"
    return "it is profiling already" if busy else None


class StepAnatomy:
    """One window of `steps` decode steps, from the next: the engine calls `before_step` and
    `after_step` around each decode step and `end` when the run ends; each says True once the
    window is over (its Anatomy emitted). Starting and ending are phases: outside the steps' timing."""

    def __init__(self, steps: int, trace_path: str, decoder, phases, emit):
        self.steps, self.trace_path = steps, trace_path
        self.decoder, self.phases, self.emit = decoder, phases, emit
        self.levers = None  # the first step's: set when the window starts
        self.done = 0
        self._hooks: list = []
        self._open: list = []
        self.graph = ""
        self.prof: torch.profiler.profile | None = None
        self.kernel_type: DeviceType | None = None  # the device's kernels' type in the events; None on the CPU
        phases.start("profile", f"the anatomy of the next {steps} decode steps, under torch.profiler")

    def before_step(self, run_id: int, levers, model) -> bool:
        if self.levers is not None:
            return self.levers != levers and self.end(run_id)  # a lever switched: the window is the steps before
        t0 = time.perf_counter()
        self.levers = levers
        lean = self.decoder.lean_step(model)
        self.graph = "compiled graph (torch.compile)" if levers.compile else ""
        if not self.graph:  # a hook on a compiled module would recompile it
            self._hook(model, lean)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if kernels := devices.profiler_kernels(self.decoder.device, torch):
            activities.append(kernels[0])
            self.kernel_type = kernels[1]
        self.prof = torch.profiler.profile(activities=activities)
        with _kineto_quiet():
            self.prof.__enter__()
        self.decoder.mark = torch.profiler.record_function
        self.phases.done("profile", "torch.profiler on", time.perf_counter() - t0)
        return False

    def _hook(self, model, lean) -> None:
        """A range around each module that is a part: the outermost one of each part, so a layer's
        MLP is one range and not five (each range costs the profiled step); where the lean step
        calls a quantized layer's projections directly, without their attention or MLP module,
        those projections and the joined ones."""
        joined = lean is not None and any(j is not None for j in lean.joints)
        hooked: list[str] = []
        for name, module in [*model.named_modules(), *(lean.named_joints() if joined else ())]:
            part = part_of(name)
            if part is None or (not joined and any(name.startswith(h + ".") for h in hooked)):
                continue
            hooked.append(name)
            self._hooks.append(module.register_forward_pre_hook(self._enter(f"tt.{part}")))
            self._hooks.append(module.register_forward_hook(self._exit))

    def after_step(self, run_id: int) -> bool:
        self.done += 1
        return self.done >= self.steps and self.end(run_id)

    def _enter(self, name: str):
        def pre(module, args) -> None:
            rf = torch.profiler.record_function(name)
            rf.__enter__()
            self._open.append(rf)

        return pre

    def _exit(self, module, args, out) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    def end(self, run_id: int) -> bool:
        """The window ends here: hooks off, the profiler's events read, the trace written, the
        Anatomy emitted. False where it never started (no decode step came yet)."""
        if self.levers is None:
            return False
        if self.prof is None:  # ended already (its event's listener raised): the window is over
            return True
        prof, self.prof = self.prof, None  # once: whatever a listener of the event does, the profiler is not exited twice
        t0 = time.perf_counter()
        self.decoder.mark = no_mark
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        with _kineto_quiet():
            prof.__exit__(None, None, None)
        events = prof.events()
        steps, step_us, parts, gpu, (ops_us, n_ops) = read_anatomy(events, self.graph)
        busy_us, idle_us = kernel_gaps(events, self.kernel_type)
        trace_error = ""
        try:  # a full disk or a folder gone loses the trace, not the anatomy or the run
            os.makedirs(os.path.dirname(os.path.abspath(self.trace_path)), exist_ok=True)
            prof.export_chrome_trace(self.trace_path)
        except OSError as exc:
            trace_error = f"{exc.strerror or exc} ({self.trace_path})"
        ev = Anatomy(
            run_id=run_id,
            steps=steps,
            step_ms=step_us / 1000,
            parts={k: v / 1000 for k, v in parts.items()},
            gpu_ms={k: v / 1000 for k, v in gpu.items()},
            ops_ms=ops_us / 1000,
            ops=n_ops,
            gpu_busy_ms=busy_us / 1000,
            gpu_idle_ms=idle_us / 1000,
            trace="" if trace_error else self.trace_path,
            trace_error=trace_error,
            levers=self.levers,
        )
        ev.read_s = time.perf_counter() - t0
        where = f"the trace was not written: {trace_error}" if trace_error else f"the trace: {self.trace_path}"
        self.phases.done("profile", f"{steps} decode steps profiled; {where}", ev.read_s)
        self.emit(ev)
        return True


def read_anatomy(events, graph: str = "") -> tuple[int, float, dict[str, float], dict[str, float], tuple[float, float]]:
    """(steps, mean step µs, part → mean µs a step, part → mean GPU kernel µs a step, (the median
    step's µs inside torch's ops, and its ops)) from the profiler's events of a window. Parts, in order: the model's,
    the step's own, framework last."""
    steps = host_steps(events)
    if not steps:
        return 0, 0.0, {}, {}, (0.0, 0.0)
    total: dict[str, float] = {}
    gpu: dict[str, float] = {}
    for step in steps:
        for part, us, dev in _parts(step, graph):
            total[part] = total.get(part, 0.0) + us
            gpu[part] = gpu.get(part, 0.0) + dev
    n = len(steps)
    step_us = sum(s.time_range.elapsed_us() for s in steps) / n
    order = [*MODULE_PARTS, *(k for k in total if k not in MODULE_PARTS and k not in STEP_PARTS), *STEP_PARTS]
    parts = {k: total[k] / n for k in order if k in total}
    parts["framework"] = max(0.0, step_us - sum(parts.values()))
    # The median step's ops, as the roofline weighs them against the median unprofiled step: with
    # the mean, a few steps the machine held up can put more time inside the ops than a whole step
    # (a fresh-clone run on 2026-11-29, a 16-wide Llama: 0 % outside the ops and 20 µs or more an
    # op, where the same window alone gave 37 % and 9 µs).
    ops = [_ops(s) for s in steps]
    return n, step_us, parts, {k: v / n for k, v in gpu.items() if v > 0}, (statistics.median(us for us, _ in ops), statistics.median(k for _, k in ops))


def host_steps(events) -> list:
    return [e for e in events if e.name == "tt.step" and e.device_type == DeviceType.CPU]


def kernel_gaps(events, kernel_type: DeviceType | None = DeviceType.CUDA) -> tuple[float, float]:
    """(µs a step the GPU ran a kernel, µs a step it sat idle between the step's first kernel and
    its last), means over the window's steps: a step's kernels are those that start inside its
    range, since it ends on the host read that waits for them. Idle gaps are the GPU waiting on the
    host to launch the next kernel: a launch-bound step, which CUDA graphs help. Kernels are the
    events of `kernel_type` (CUDA's, ROCm's as CUDA, XPU's); (0, 0) where it is None: the CPU."""
    # A range recorded on the host also comes back as a GPU annotation of the same name, spanning
    # its kernels on the GPU's timeline: neither a kernel nor a step (seen on an H200).
    kernels = sorted((k.time_range.start, k.time_range.end) for k in events if k.device_type == kernel_type and not k.is_user_annotation)
    steps = host_steps(events)
    if not kernels or not steps:
        return 0.0, 0.0
    busy = idle = 0.0
    for step in steps:
        start, end = step.time_range.start, step.time_range.end
        mine = [k for k in kernels if start <= k[0] < end]
        if not mine:
            continue
        covered, reach = 0.0, mine[0][0]
        for k0, k1 in mine:  # the union of the kernels' spans: kernels of two streams overlap
            covered += max(0.0, k1 - max(k0, reach))
            reach = max(reach, k1)
        busy += covered
        idle += reach - mine[0][0] - covered
    return busy / len(steps), idle / len(steps)


def _ops(event) -> tuple[float, int]:
    """(µs, count) of torch's ops under `event` (the outermost op of each nest): the rest of a
    step is Python, inside the modules or between them."""
    us, count = 0.0, 0
    for c in event.cpu_children:
        if c.name.startswith("tt."):
            sub_us, sub_n = _ops(c)
            us, count = us + sub_us, count + sub_n
        else:
            us, count = us + c.time_range.elapsed_us(), count + 1
    return us, count


def _parts(step, graph: str):
    """(part, CPU µs, GPU µs) of everything under one step's range that is a part's."""
    for child in step.cpu_children:
        name = child.name
        if name == "tt.forward":
            yield from _forward(child, graph)
        elif name.startswith("tt.") and name[3:] in STEP_PARTS:
            yield name[3:], child.time_range.elapsed_us(), _device_us(child)


def _forward(forward, graph: str):
    found = False
    # Under compile no module is hooked, and an op of the graph named for attention is not the part.
    for part, event in () if graph else _walk(forward):
        found = True
        yield part, event.time_range.elapsed_us(), _device_us(event)
    if not found:  # one graph (compile, the fused step): the forward is one part, named by its largest op
        ops = sorted(forward.cpu_children, key=lambda e: -e.time_range.elapsed_us())
        name = graph or (f"one op: {ops[0].name}" if ops else "one graph")
        yield name, sum(e.time_range.elapsed_us() for e in ops), sum(_device_us(e) for e in ops)


def _walk(event):
    for child in event.cpu_children:
        if child.name.startswith("tt.") and child.name[3:] in MODULE_PARTS:
            yield child.name[3:], child
        elif "attention" in child.name.lower():  # the attention op, called outside its module
            yield "attention", child
        else:
            yield from _walk(child)


def _device_us(event) -> float:
    # Kernels launched by the range's ops, descendants included (torch's own sum for an event).
    return float(getattr(event, "device_time_total", 0.0) or 0.0)
