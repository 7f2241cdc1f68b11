"""What each GPU probe and the CPU's RAPL counter cost a sample, and the sampler's whole cost on
the engine's decode.

Reads: each vendor's probe on its fixture tree (tests/fixtures/sysfs/: the files and the fdinfo
of one process, as the kernel lays them out; a live sysfs file is read from the driver, so a
fixture's figure is the probe's own parsing and the page cache's, not the driver's), and a whole
sample (psutil's process and system figures with it), the median of many, µs; at 4 Hz, % of a core.
RAPL on a tree of two packages (each with a subzone, as powercap lays them out), which every
sample reads for a CPU run's energy.

Decode (--pairs N): the default model in this process, runs with a Sampler thread at 4 Hz reading
the AMD fixture (the probe that reads the most files) and without one, interleaved in pairs whose
order alternates; each run's median decode step (Step.compute_ns); the median of the pairs' ratios
and their range. In this process the sampler also contends for the GIL, a stricter case than the
app's, where it runs in the UI's process.

    .venv/bin/python benchmarks/engine/probe_cost.py [--reads 2000] [--pairs 12] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.events import Step
from monitors.gpu_amd import AmdSysfsReader
from monitors.gpu_intel import IntelSysfsReader
from monitors.rapl import RaplReader
from monitors.sampler import Sampler

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs"
PROBES = {"amdgpu (mi300x)": (AmdSysfsReader, "mi300x"), "i915 (arc_i915)": (IntelSysfsReader, "arc_i915"), "xe (bmg_xe)": (IntelSysfsReader, "bmg_xe")}
PID = frozenset({4242})  # the fixtures' process
HZ = 4.0


def per_read_us(fn, n: int) -> float:
    return statistics.median(t / n for t in timeit.repeat(fn, number=n, repeat=5)) * 1e6


def decode(pairs: int, tokens: int) -> None:
    from tui_app.engine.config import EngineConfig
    from tui_app.engine.generation import Engine
    from tui_app.engine.models import DEFAULT_MODEL
    from tui_app.requests import RunRequest

    events: list = []
    engine = Engine(EngineConfig(model=DEFAULT_MODEL), events.append)
    engine.load()
    req = RunRequest(prompt="Tell me about the sea.", max_new_tokens=tokens, ignore_eos=True)
    engine.run(req)  # warm
    ratios, on_ms = [], []
    for pair in range(pairs):
        step_ms = {}
        for sampled in (True, False) if pair % 2 == 0 else (False, True):  # each order as often: no first-run bias
            sampler = Sampler(hz=HZ, gpu=AmdSysfsReader(FIXTURES / "mi300x")).start() if sampled else None
            done = engine.run(req)
            if sampler is not None:
                sampler.stop()
            steps = [e.compute_ns for e in events if isinstance(e, Step) and e.run_id == done.run_id and e.kind == "decode"]
            step_ms[sampled] = statistics.median(steps) / 1e6
            events.clear()
        ratios.append(step_ms[True] / step_ms[False])
        on_ms.append(step_ms[True])
    print(
        f"decode step with the sampler at {HZ:g} Hz (amdgpu probe) ÷ without: median {statistics.median(ratios):.4f} over {pairs} pairs "
        f"(range {min(ratios):.4f}–{max(ratios):.4f}); a step {statistics.median(on_ms):.2f} ms"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=0, help="decode pairs with and without the sampler (0: the reads alone)")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    print("probe             a read, µs   a whole sample, µs   at 4 Hz, % of a core")
    for name, (cls, tree) in PROBES.items():
        reader = cls(FIXTURES / tree)
        read_us = per_read_us(lambda r=reader: r.read(PID), args.reads)
        sampler = Sampler(hz=HZ, gpu=cls(FIXTURES / tree))
        sample_us = per_read_us(sampler.sample_once, max(args.reads // 10, 1))
        print(f"{name:<17} {read_us:>10.1f}   {sample_us:>18.1f}   {sample_us * HZ / 1e4:>20.3f}")
    with tempfile.TemporaryDirectory() as tmp:
        for zone in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1", "intel-rapl:1:0"):
            folder = Path(tmp, "sys", "class", "powercap", zone)
            folder.mkdir(parents=True)
            folder.joinpath("energy_uj").write_text("123456789\n")
            folder.joinpath("max_energy_range_uj").write_text("262143328850\n")
        read_us = per_read_us(RaplReader(tmp).read, args.reads)
        print(f"{'RAPL (2 packages)':<17} {read_us:>10.1f}   {'':>18}   {read_us * HZ / 1e4:>20.3f}")
    if args.pairs:
        decode(args.pairs, args.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
