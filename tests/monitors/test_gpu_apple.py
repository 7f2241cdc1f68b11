"""The Apple-silicon probe (monitors/gpu_apple.py) on an IORegistry plist and `macmon pipe` lines laid
out as each tool writes them (tests/fixtures/apple/README.md): utilization and the GPU's memory from
ioreg, power, clock and temperature from a real process printing macmon's lines, the energy summed
over them, and ioreg missing, macmon hanging or exiting as n/a with the reason."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from benchmarks.common.deadline import Deadline
from monitors.gpu_apple import IOREG_EVERY_S, STALE_LINES, AppleReader

APPLE = Path(__file__).resolve().parents[1] / "fixtures" / "apple"
PLIST = (APPLE / "ioreg-m2max.plist").read_bytes()


class Clock:
    ns = 10**12

    def __call__(self) -> int:
        return self.ns


def macmon(lines: int, then: str = "exit") -> list[str]:
    """A process printing the fixture's first `lines` lines as `macmon pipe` does, then exiting or hanging."""
    script = (
        "import sys, time\n"
        f"for line in open({str(APPLE / 'macmon-pipe.jsonl')!r}).readlines()[:{lines}]:\n"
        "    print(line, end='', flush=True)\n"
        f"{'time.sleep(3600)' if then == 'hang' else 'pass'}\n"
    )
    return [sys.executable, "-c", script]


def settled(reader: AppleReader, until, timeout: float = 20.0):
    deadline = Deadline(timeout)
    while not deadline.passed():
        g = reader.read().gpus[0]
        if until(g):
            return g
        time.sleep(0.02)
    raise AssertionError(f"never settled: {reader.read().gpus[0]}")


def test_the_m2_max_from_its_ioregistry_and_macmons_lines():
    reader = AppleReader(run=lambda: PLIST, macmon=macmon(4, then="hang"), platform="darwin")
    try:
        assert reader.ok
        g = settled(reader, lambda g: g.energy_mj == round((18.4 + 19.6 + 19.0 + 19.2) * 0.25 * 1000))
        assert g.name == "Apple M2 Max (38 GPU cores)" and g.sm_util == 64.0 and g.mem_used == 9663676416
        assert (g.power_w, g.sm_clock_mhz, g.temp_c, g.reason) == (19.2, 1398, 52.6, "")  # the last line's
    finally:
        reader.close()


def test_ioreg_runs_at_most_once_a_second():
    calls, clock = [], Clock()
    reader = AppleReader(run=lambda: calls.append(1) or PLIST, macmon=None, platform="darwin", clock=clock)
    for _ in range(16):  # 2 s at 8 Hz, the sampler's fastest
        reader.read()
        clock.ns += 125_000_000
    assert IOREG_EVERY_S == 1.0 and len(calls) == 2  # at the start, and a second later


def test_macmon_hanging_or_exiting_is_na_with_the_reason():
    clock = Clock()
    hung = AppleReader(run=lambda: PLIST, macmon=macmon(1, then="hang"), platform="darwin", clock=clock)
    try:
        settled(hung, lambda g: g.power_w == 18.4)
        clock.ns += int((STALE_LINES * 0.25 + 3) * 1e9)
        g = hung.read().gpus[0]
        assert g.power_w is None and g.reason == "macmon: no line for 5 s (hung?)" and g.sm_util == 64.0
    finally:
        hung.close()
    gone = AppleReader(run=lambda: PLIST, macmon=macmon(0), platform="darwin")
    try:
        assert settled(gone, lambda g: g.reason.startswith("macmon exited")).power_w is None
    finally:
        gone.close()


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        (lambda: (_ for _ in ()).throw(FileNotFoundError("ioreg")), "n/a: ioreg not found"),
        (lambda: b"<plist>garbled", "n/a: ioreg's IOAccelerator unreadable (ExpatError)"),
        (lambda: b'<?xml version="1.0"?><plist version="1.0"><array/></plist>', "n/a: no IOAccelerator with PerformanceStatistics in the IORegistry"),
    ],
)
def test_ioreg_missing_garbled_or_empty_is_na_with_the_reason(run, reason):
    reader = AppleReader(run=run, macmon=None, platform="darwin")
    assert not reader.ok and reader.reason == reason and reader.read().reason == reason


def test_off_macos_it_says_so_and_a_dumped_plist_reads_anywhere(tmp_path):
    here = AppleReader(tmp_path, platform="linux")
    assert not here.ok and here.reason == "n/a: not macOS (Apple's GPUs are read through its IORegistry)"
    (tmp_path / "ioreg.plist").write_bytes(PLIST)
    (g,) = AppleReader(tmp_path, platform="linux").read().gpus
    assert g.sm_util == 64.0 and g.power_w is None and g.reason == "macmon's lines are the live Mac's, not a folder's"
