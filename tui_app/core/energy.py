"""The energy behind J/token: a counter read with each sample, and each run's share of its rise.
The GPUs' where every GPU counts energy (NVML's; hwmon's energy1_input on AMD and Intel; macmon's
power summed on a Mac), else the CPU packages' (RAPL through powercap, monitors/rapl.py). A CPU
package counts all it ran, the UI and other processes included, as a server's GPU counts other
clients' requests: the source is named wherever the figure is shown. Without either, the reason."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from monitors.events import Sampled
from monitors.timing import TimingStats

ENERGY_SAMPLES = 40  # readings behind the live J/token: 10 s at the default 4 Hz
GPU, CPU = "GPU", "CPU packages (RAPL)"


@dataclass
class EnergyBook:
    recent: deque = field(default_factory=lambda: deque(maxlen=ENERGY_SAMPLES))  # (t_ns, mJ counted, tokens seen)
    source: str = ""  # whose counter `recent` holds: GPU or CPU
    reason: str = ""  # why no counter, as the last sample without one said
    runs: dict = field(default_factory=dict)  # run id → (source, J its counter rose over the run's span)

    def feed(self, ev: Sampled, tokens: int, rec) -> None:
        mj = [g.get("energy_mj") for g in ev.gpus or ()]
        if mj and None not in mj:
            source, total = GPU, sum(mj)
        elif ev.cpu_energy_mj is not None:
            source, total = CPU, ev.cpu_energy_mj
        else:
            gpus = "the GPUs count no energy" if ev.gpus else ""
            self.reason = "; ".join(x for x in (gpus, ev.cpu_energy_reason) if x) or "n/a: no energy counter read"
            return
        if source != self.source:  # a restarted engine on another device: one counter's readings only
            self.recent.clear()
            self.source = source
        self.recent.append((ev.t_ns, total, tokens))
        if len(self.recent) > 1 and rec is not None:
            self._run(rec)

    def _run(self, rec) -> None:
        """The counter's rise since the last sample, its share that overlaps the run (the power taken
        as even between two samples): a run's first and last quarter second are its own, not the idle's."""
        (t0, e0, _), (t1, e1, _) = self.recent[-2], self.recent[-1]
        end = rec.finished.t_ns if rec.finished is not None else t1
        overlap = min(t1, end) - max(t0, rec.started.t_ns)
        if overlap > 0 and t1 > t0:
            rid = rec.started.run_id
            _, joules = self.runs.get(rid, (self.source, 0.0))
            self.runs[rid] = (self.source, joules + max(0, e1 - e0) / 1000 * overlap / (t1 - t0))

    def joules_per_token(self) -> float | None:
        """Δ the counter ÷ Δ tokens tokentop saw generated over the last readings: None without the
        counter or tokens."""
        if len(self.recent) < 2:
            return None
        (_, e0, n0), (_, e1, n1) = self.recent[0], self.recent[-1]
        return (e1 - e0) / 1000 / (n1 - n0) if n1 > n0 else None


def per_token(joules: float | None, stats: TimingStats) -> float | None:
    """A run's energy over its generated tokens (every row of a batch's): None without a counter."""
    n = stats.seq_tokens or stats.n_tokens
    return joules / n if joules and n else None
