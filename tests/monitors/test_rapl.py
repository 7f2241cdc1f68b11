"""The CPU's energy through powercap's RAPL zones (monitors/rapl.py), on a tree laid out as the
kernel's (Documentation/power/powercap/powercap.rst): packages summed, their subzones not counted
twice, a wrap between readings carried, and an unreadable counter n/a with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitors.rapl import RaplReader


class Clock:
    ns = 10**12

    def __call__(self) -> int:
        return self.ns


def zone(root: Path, name: str, uj: int, span: int = 262143328850) -> Path:
    z = root / "sys" / "class" / "powercap" / name
    z.mkdir(parents=True, exist_ok=True)
    (z / "name").write_text("package-" + name.split(":")[1] + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{span}\n")
    return z


def test_two_packages_summed_their_power_over_the_clock_and_a_wrap_carried(tmp_path):
    a, b = zone(tmp_path, "intel-rapl:0", 1_000_000), zone(tmp_path, "intel-rapl:1", 262143328850 - 500_000)
    zone(tmp_path, "intel-rapl:0:0", 999_999_999)  # the package's core subzone: inside its package's count
    clock = Clock()
    reader = RaplReader(tmp_path, clock=clock)
    first = reader.read()
    assert first.packages == 2 and first.power_w is None and first.energy_j == pytest.approx(1 + 262143.32885 - 0.5)
    (a / "energy_uj").write_text(f"{1_000_000 + 30_000_000}\n")  # 30 J
    (b / "energy_uj").write_text(f"{19_500_000}\n")  # 0.5 J to the wrap, then 19.5 J: 20 J
    clock.ns += 500_000_000
    assert reader.read().power_w == pytest.approx(100.0)


def test_no_rapl_a_garbled_or_a_vanished_counter_is_na_with_the_reason(tmp_path):
    assert RaplReader(tmp_path).read().reason == f"n/a: no RAPL package under {tmp_path}/sys/class/powercap (a VM, or a CPU without it)"
    z = zone(tmp_path, "intel-rapl:0", 5)
    reader = RaplReader(tmp_path)
    (z / "energy_uj").write_text("garbled\n")
    got = reader.read()
    assert got.energy_j is None and got.reason == "n/a: intel-rapl:0/energy_uj unreadable: not a number ('garbled')"
    (z / "energy_uj").unlink()
    assert reader.read().reason == "n/a: intel-rapl:0/energy_uj unreadable: gone"
