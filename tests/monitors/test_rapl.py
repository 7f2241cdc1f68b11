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
    after = reader.read()
    assert after.power_w == pytest.approx(100.0)
    # What a span's energy is read from: the rises since the first reading, the wrap undone (the
    # raw sum fell by 262 kJ across it)
    assert first.counted_j == 0 and after.counted_j == pytest.approx(50.0) and after.energy_j < first.energy_j


def test_no_rapl_a_garbled_or_a_vanished_counter_is_na_with_the_reason(tmp_path):
    assert RaplReader(tmp_path).read().reason == f"n/a: no RAPL package under {tmp_path}/sys/class/powercap (a VM, or a CPU without it)"
    z = zone(tmp_path, "intel-rapl:0", 5)
    reader = RaplReader(tmp_path)
    (z / "energy_uj").write_text("garbled\n")
    got = reader.read()
    assert got.energy_j is None and got.reason == "n/a: intel-rapl:0/energy_uj unreadable: not a number ('garbled')"
    (z / "energy_uj").unlink()
    assert reader.read().reason == "n/a: intel-rapl:0/energy_uj unreadable: gone"


def cpu_run(tmp_path, gpu=None):
    """A run on the CPU sampled four times while its package's counter rises (synthetic.energy_run),
    as test_gpu_intel.py's run is on a GPU's hwmon counter: its session."""
    from monitors.gpu_intel import IntelSysfsReader
    from monitors.sampler import Sampler
    from tests.helpers.synthetic import energy_run
    from tui_app.core.session import Session

    z, clock = zone(tmp_path, "intel-rapl:0", 7_000_000), Clock()
    sampler = Sampler(gpu=gpu or IntelSysfsReader(tmp_path / "no-gpu"), rapl=RaplReader(tmp_path, clock=clock))
    session = Session()
    energy_run(session, sampler, z / "energy_uj", clock)
    sampler.stop()
    return session


async def test_a_cpu_runs_energy_is_its_packages_named_so_in_its_row_json_table_and_chart(tmp_path):
    """Without a GPU that counts energy, the CPU packages' RAPL counter gives the run's J a token,
    as a GPU's would (the rise over the run's span, the power even between two samples), named as
    the packages' wherever it shows: they count all they ran, the UI and other processes too."""
    import json

    from tests.helpers.one_widget import subtitle
    from tui_app.core.columns import columns_for
    from tui_app.core.energy import CPU
    from tui_app.core.export import run_json
    from tui_app.ui.widgets.util_chart import UtilChart

    session = cpu_run(tmp_path)
    (row,) = session.rows()
    assert row.energy_source == CPU and row.energy_j == pytest.approx(2 + 3 + 0.8) and row.j_per_token == pytest.approx(5.8 / 20)
    data = json.loads(run_json(session, 1))
    assert data["cpu_energy_j"] == pytest.approx(5.8) and data["gpu_energy_j"] is None and data["j_per_token"] == pytest.approx(0.29)
    assert data["energy_reason"] is None
    assert {"J/token", "tok/s/W"} <= {c.title for c in columns_for([row])}
    assert session.energy.joules_per_token() == pytest.approx((10 + 3 + 3) / 20)  # the live figure: all four readings
    shown = await subtitle(UtilChart(session))
    assert "CPU pkg 0.80 J/token" in shown, shown


def test_a_gpu_that_counts_energy_outranks_the_cpu_packages(tmp_path):
    """The engine's device is the GPU where one counts energy: its J, not the packages'."""
    import shutil

    from monitors.gpu_intel import IntelSysfsReader
    from tui_app.core.energy import GPU

    tree = tmp_path / "bmg_xe"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "bmg_xe", tree)
    session = cpu_run(tmp_path, gpu=IntelSysfsReader(tree))  # the GPU's counter stands still: 0 J
    (row,) = session.rows()
    assert session.energy.source == GPU and row.energy_source == GPU and not row.energy_j


async def test_without_a_counter_the_figure_is_absent_and_the_reason_said(tmp_path):
    """No GPU and no RAPL (this VM): the run's J/token is n/a with the sample's reason, in its JSON
    and in the utilization pane, never 0."""
    import json

    from monitors.gpu_intel import IntelSysfsReader
    from monitors.sampler import Sampler, to_event
    from tests.helpers.one_widget import subtitle
    from tests.helpers.synthetic import energy_run
    from tui_app.core.columns import columns_for
    from tui_app.core.export import run_json
    from tui_app.core.session import Session
    from tui_app.ui.widgets.util_chart import UtilChart

    sampler, session = Sampler(gpu=IntelSysfsReader(tmp_path), rapl=RaplReader(tmp_path)), Session()
    ev = to_event(sampler.sample_once())
    assert ev.cpu_energy_mj is None and ev.cpu_energy_reason.startswith("n/a: no RAPL package under")
    counter = tmp_path / "read-by-none"
    counter.write_text("0")
    energy_run(session, sampler, counter)
    sampler.stop()
    (row,) = session.rows()
    assert session.energy.joules_per_token() is None and row.energy_j is None and row.j_per_token is None
    assert row.energy_reason == session.energy.reason == ev.cpu_energy_reason
    data = json.loads(run_json(session, 1))
    assert data["j_per_token"] is None and data["cpu_energy_j"] is None and data["energy_reason"] == ev.cpu_energy_reason
    assert "J/token" not in {c.title for c in columns_for([row])}
    shown = await subtitle(UtilChart(session), size=(400, 30))  # room for both long paths
    assert f"J/token {ev.cpu_energy_reason}" in shown, shown
