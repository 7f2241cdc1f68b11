"""Memory over time: engine and UI RSS, GPU memory (process and device), torch allocated/reserved,
run ends marked; the leak detector's verdict in the title. One sample a point, paged (core/axes.py);
torch's figures and the run ends at the sample of their time. `L` switches the pane to the leak
view (core/leak_view.py): the baselines the verdict is fitted to, on an axis of their own."""

from __future__ import annotations

from bisect import bisect_left

from rich.text import Text

from monitors.torch_memory import limit_text, trouble_text
from tui_app.core import fmt, leak_view, readings
from tui_app.core.braille import Canvas, plot
from tui_app.ui.widgets.chart import Chart, gpu_unread

MIB = 2**20


class MemoryChart(Chart):
    MAX_HZ = Chart.SAMPLED_HZ
    leak_view = False  # L: the baselines and their fit instead of the memory over time

    def draw_chart(self, width: int, height: int) -> list | Text:
        s = self.session
        canvas = self.canvas(width, height - 1)
        verdict = s.verdict.text() if s.verdict else "leak: collecting (0 runs)"
        title = [((f"memory — {verdict}", f"memory — {verdict.split(' (')[0]}", "memory"), 0)]
        if s.ready is not None and s.ready.demo_leak:  # after the verdict: it shortens first, and stays
            title.append(((f"DEMO LEAK {s.ready.demo_leak}", "DEMO LEAK"), 0))
        device = readings.device_leak_text(s)
        if device is not None:
            title.append(((device, device.split(" (")[0]), 1))
        self.set_titles(title)
        if self.leak_view:
            return self._leak(canvas, title)
        samples = self.sample_page(canvas.px_w)
        if not samples:
            return Text("waiting for samples…", style="dim")
        t0 = samples[0].t_ns
        times = [x.t_ns for x in samples]

        def col(attr):
            return [getattr(x, attr) / MIB if getattr(x, attr) is not None else None for x in samples]

        watched = "server RSS" if s.ready is not None and s.ready.server else "engine RSS"
        names = [(watched, col("engine_rss")), ("UI RSS", col("app_rss"))]
        if any(x.gpu_mem_used is not None for x in samples):
            names += [("GPU proc", col("gpu_proc_mem")), ("GPU device", col("gpu_mem_used"))]
        torch_mem = [m for m in s.torch_mem if m.t_ns >= t0]
        series = [v for _, v in names]
        xs = [list(range(len(samples)))] * len(names)
        if torch_mem:
            names += [("torch alloc", [m.allocated / MIB for m in torch_mem]), ("torch reserved", [m.reserved / MIB for m in torch_mem])]
            series += [names[-2][1], names[-1][1]]
            xs += [[bisect_left(times, m.t_ns) for m in torch_mem]] * 2
        lo = 0.0
        hi = self.scale.fit(max((v for ser in series for v in ser if v is not None), default=1.0))
        plot(canvas, series, lo, hi, xs=xs, x_lo=0, x_hi=canvas.px_w - 1)
        for t in s.run_marks:
            if t0 <= t <= times[-1]:
                canvas.vline(bisect_left(times, t), 5)
        last = samples[-1]
        if last.gpus and last.gpu_mem_used is not None:
            gpu = [_gpu_memory(g, len(last.gpus)) for g in last.gpus]
        else:
            gpu = [((f"GPU: {last.gpu_reason}", "GPU: n/a"), 3)] if last.gpu_mem_used is None else []
        if s.ready is not None and s.ready.placement:  # --device-map: where the weights are
            gpu.insert(0, ((f"weights {fmt.where(s.ready)}", "weights placed"), 1))
        # Where the memory is (readings.memory_budget): it stays longer than the GPU items, not the UI's figure.
        budget = readings.memory_budget(s)
        split = [] if budget is None else [((readings.budget_text(budget, whole=budget[0] != "engine"),), 1)]
        # The allocator's counters that mean trouble, once any is not 0: they outrank the figures.
        trouble = trouble_text(s.torch_mem[-1] if s.torch_mem else None)
        split += [((trouble,), 0)] if trouble else []
        # On MPS, the GPU's share of unified memory: the Apple probe has no device total to set it against.
        metal = limit_text(s.torch_mem[-1] if s.torch_mem else None)
        split += [(metal, 1)] if metal else []
        split += [(readings.history_text(s.allocator_history), 0)] if s.allocator_history else []  # recording, or where it was saved
        self.set_titles(title, [((f"{watched.split()[0]} {_mib(last.engine_rss)}",), 0), *split, *gpu, ((f"UI {_mib(last.app_rss)}",), 2)])
        return self.compose_text(canvas, lo, hi, lambda v: f"{v:.0f}MiB", [(n, i) for i, (n, _) in enumerate(names)] + [("run end", 5)])

    def _leak(self, canvas: Canvas, title) -> list | Text:
        s = self.session
        watched = "server" if s.ready is not None and s.ready.server else "engine"
        drawn = leak_view.draw(canvas, s.leak, s.verdict)
        self.set_titles(title, [((f"leak view: the {watched}'s RSS after each run, on its own scale · L: memory over time", "leak view · L: back"), 0)])
        if drawn is None:
            return Text(f"leak view: no run has ended yet; each run's end adds its {watched}'s baseline here (L: memory over time)", style="dim")
        lo, hi, legend = drawn
        return self.compose_text(canvas, lo, hi, lambda v: f"{v:.1f}MiB" if hi - lo < 20 else f"{v:.0f}MiB", legend)


def _mib(n: int | None) -> str:
    """Whole MiB, or "–" where the process is not seen (a server on another host)."""
    return "–" if n is None else f"{n / MIB:.0f} MiB"


def _gpu_memory(g: dict, count: int) -> tuple[tuple[str, ...], int]:
    """One GPU of the machine: the engine's memory on it (NVML's per-process count) and the device's."""
    name = f"GPU{g['index']}" if count > 1 else "GPU"
    if g["mem_used"] is None:
        return (gpu_unread(name, g["reason"]), f"{name} n/a"), 3
    gib = f"{g['mem_used'] / 2**30:.1f}/{g['mem_total'] / 2**30:.0f} GiB"
    if g["proc_mem"] is None:
        return (f"{name} {gib}",), 1 if g["index"] == 0 else 3
    # Shorter, the engine's own memory on the GPU stays: it is what the pane watches.
    variants = (f"{name} engine {_mib(g['proc_mem'])}, device {gib}", f"{name} engine {_mib(g['proc_mem'])}", f"{name} {_mib(g['proc_mem'])}")
    return variants, 1 if g["index"] == 0 else 3
