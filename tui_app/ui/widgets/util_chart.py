"""Utilization: CPU % of the engine process and of the system, GPU busy % (NVML's share of time a
kernel ran, not of SMs busy) and NVML's memory busy % of the GPUs the engine is on,
and decode's memory read rate as a % of the measured read of the same bytes (Session.read_rate);
on Hopper and later, GPM's DRAM bandwidth %. Every GPU's busy %, clock, power, GPM figures and
the reasons its clocks are held down (NVML's clock events) in the subtitle."""

from __future__ import annotations

from rich.text import Text

from tui_app.core import readings
from tui_app.core.braille import plot
from tui_app.core.energy import CPU
from tui_app.ui.widgets.chart import Chart, gpu_unread

GPM_LABELS = (("dram_pct", "DRAM"), ("sm_active_pct", "SM active"), ("tensor_pct", "tensor"))


class UtilChart(Chart):
    MAX_HZ = Chart.SAMPLED_HZ
    SCALE_FLOOR = 100.0

    def draw_chart(self, width: int, height: int) -> list | Text:
        s = self.session
        canvas = self.canvas(width, height - 1)
        samples = self.sample_page(canvas.px_w)
        self.border_title = "utilization"
        if not samples:
            return Text("waiting for samples…", style="dim")
        watched = "server" if s.ready is not None and s.ready.server else "engine"
        names = [(f"{watched} CPU%", [x.engine_cpu for x in samples]), ("system CPU%", [x.sys_cpu for x in samples]), ("UI CPU%", [x.app_cpu for x in samples])]
        has_gpu = any(x.gpu_sm is not None for x in samples)
        if has_gpu:
            names.append(("GPU busy%", [x.gpu_sm for x in samples]))  # NVML's "a kernel was running" share of its sample period, not SMs in use
        if any(x.gpu_dram_pct is not None for x in samples):
            names.append(("GPU DRAM%", [x.gpu_dram_pct for x in samples]))  # GPM's: the share of DRAM bandwidth used (Hopper and later)
        if any(x.gpu_mem_util is not None for x in samples):
            names.append(("GPU mem%", [x.gpu_mem_util for x in samples]))  # NVML's: time the memory was busy, not bytes
        reads = list(s.mem_read)[-len(samples) :]
        if any(r is not None for r in reads):
            names.append(("mem bw%", [None if r is None else r * 100 for r in reads]))
        series = [v for _, v in names]
        hi = self.scale.fit(max((v for ser in series for v in ser if v is not None), default=0.0))
        plot(canvas, series, 0.0, hi, x_hi=canvas.px_w - 1)
        last = samples[-1]
        if last.gpus:
            gpu = [_gpu_util(g, len(last.gpus)) for g in last.gpus]
        elif last.gpu_power_w is not None:  # a recording from before the per-GPU figures
            gpu = [((f"power {last.gpu_power_w:.0f} W",), 1)]
        else:
            gpu = [((f"GPU: {last.gpu_reason or 'n/a'}", "GPU: n/a"), 3)]
        jpt = s.energy.joules_per_token()
        if jpt is not None:  # the energy counter ÷ the tokens generated meanwhile, named by whose
            whose = "CPU pkg " if s.energy.source == CPU else ""
            gpu.append(((f"{whose}{jpt:.2f} J/token", f"{jpt:.1f} J/tok"), 2))
        elif s.energy.reason:  # said last, the first dropped where room is short
            gpu.append(((f"J/token {s.energy.reason}", "J/token n/a"), 4))
        read = readings.read_rate(s)
        bw = [] if read is None else [((f"mem bw {read[1]:.2f} of {s.bandwidth.read_bps / 1e9:.1f} GB/s", f"mem bw {read[1]:.2f}"), 2)]
        # On a GPU box its busy %, clock and power outrank the host's other figures (a 160-column
        # terminal, seen on an H200, had room for the engine's CPU % and two more items only);
        # without one, why not comes last.
        host = [*bw, ((f"system {last.sys_cpu or 0:.0f}%",), 2), ((f"UI {last.app_cpu or 0:.0f}%",), 2)]
        engine = ((f"{watched} {last.engine_cpu or 0:.0f}%",), 0)
        self.set_titles([(("utilization",), 0)], [engine, *gpu, *host] if last.gpus else [engine, *host, *gpu])
        legend = [(n, i) for i, (n, _) in enumerate(names)]
        legend.sort(key=lambda entry: not entry[0].startswith("GPU"))  # the GPU's lines named first: whole entries are dropped from the end
        return self.compose_text(canvas, 0.0, hi, lambda v: f"{v:.0f}%", legend)


def _gpu_util(g: dict, count: int) -> tuple[tuple[str, ...], int]:
    """One GPU of the machine: SM %, SM clock and power, shorter variants where room is short;
    the first GPU before the others."""
    name = f"GPU{g['index']}" if count > 1 else "GPU"
    own = g.get("proc_busy_pct")  # the engine's own share, from fdinfo (AMD, Intel; absent from older recordings)
    if g["sm_util"] is None and own is None and g["sm_clock_mhz"] is None and g["power_w"] is None:
        return (gpu_unread(name, g["reason"]), f"{name} n/a"), 3
    clock = f" {g['sm_clock_mhz']} MHz" if g["sm_clock_mhz"] is not None else ""
    power = f" {g['power_w']:.0f} W" if g["power_w"] is not None else ""
    # GPM's figures and the clock events, where the GPU has them (absent from older recordings)
    gpm = "".join(f" {label} {g[key]:.0f}%" for key, label in GPM_LABELS if g.get(key) is not None)
    slowed = f" slowed: {', '.join(g['slowed'])}" if g.get("slowed") else ""
    # Where the device's share is not read (i915, xe: their PMU's), the engine's own stands, named
    busy = f"{name} {g['sm_util']:.0f}%" if g["sm_util"] is not None else f"{name} engine {own:.0f}%" if own is not None else name
    held = " slowed" if slowed else ""
    # Narrower, GPM's figures go first (DRAM % is charted), then the word that clocks are held down
    # (the clock shows it), and last the clock and power.
    return (f"{busy}{clock}{power}{gpm}{slowed}", f"{busy}{clock}{power}{held}", f"{busy}{clock}{power}", f"{busy}{held}"), 1 if g["index"] == 0 else 3
