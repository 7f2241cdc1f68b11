"""The Intel probe on fixture trees laid out as i915's and xe's sysfs (tests/fixtures/sysfs/README.md):
each figure in its unit, power from two energy readings on an injected clock, the engine's own memory
and busy share from fdinfo, and what the drivers do not write read as n/a with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from monitors.gpu_intel import NOT_REPORTED, IntelSysfsReader
from monitors.gpus import gpu_reader

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
ARC, BMG = FIXTURES / "arc_i915", FIXTURES / "bmg_xe"


class Clock:
    def __init__(self):
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


def copy(tree: Path, tmp_path: Path) -> Path:
    shutil.copytree(tree, tmp_path / tree.name)
    return tmp_path / tree.name


def test_the_arc_under_i915_in_its_units():
    reader = IntelSysfsReader(ARC)
    assert reader.ok and [driver for _, driver in reader.devices] == ["i915"]  # the DP connector is no device
    (g,) = reader.read({4242}).gpus
    assert g.name == "Intel GPU 8086:56A0 (i915)" and g.reason == ""
    assert g.sm_clock_mhz == 2400 and g.energy_mj == 4182733 and g.temp_c is None  # i915's hwmon has no temperature
    assert g.proc_mem == 6291456 * 1024  # local0, the card's memory; system0 is the host's
    assert g.power_w is None and g.proc_busy_pct is None  # each needs a second reading
    assert (g.sm_util, g.mem_used, g.mem_total) == (None, None, None) and set(NOT_REPORTED) >= {"sm_util", "mem_used"}


def test_the_battlemage_under_xe_reads_the_compute_gt_the_package_temperature_and_vram():
    (g,) = IntelSysfsReader(BMG).read({4242}).gpus
    assert g.name == "Intel GPU 8086:E20B (xe)"
    assert g.sm_clock_mhz == 2850  # tile0/gt0, not the media GT's 1200
    assert g.temp_c == 61.0 and g.energy_mj == 98765432  # the package's, and the card's energy1
    assert g.proc_mem == 5242880 * 1024  # vram0; gtt is the host's


def test_power_is_the_energy_counters_rise_over_the_clocks(tmp_path):
    tree, clock = copy(ARC, tmp_path), Clock()
    reader = IntelSysfsReader(tree, clock=clock)
    energy = tree / "sys/class/drm/card0/device/hwmon/hwmon3/energy1_input"
    reader.read()
    energy.write_text(str(4182733190 + 45_000_000))  # 45 J
    clock.ns += 250_000_000  # in 0.25 s
    (g,) = reader.read().gpus
    assert g.power_w == pytest.approx(180.0)
    energy.write_text("1000")  # the counter restarted (a driver reload): no power from across it
    clock.ns += 250_000_000
    assert reader.read().gpus[0].power_w is None


@pytest.mark.parametrize(
    ("tree", "fdinfo", "key", "before", "after", "share"),
    [
        # i915: 150 ms of the render engine in 250 ms of wall time
        (ARC, "proc/4242/fdinfo/7", "drm-engine-render", "25662044495 ns", "25812044495 ns", 60.0),
        # xe: the class's cycles over the GPU's own timestamp, over its 4 compute engines
        (BMG, "proc/4242/fdinfo/9", "drm-cycles-ccs", "5104122150", "13104122150", 50.0),
    ],
)
def test_the_engines_own_busy_share_from_its_fdinfo(tmp_path, tree, fdinfo, key, before, after, share):
    tree, clock = copy(tree, tmp_path), Clock()
    reader = IntelSysfsReader(tree, clock=clock)
    reader.read({4242})
    info = tree / fdinfo
    text = info.read_text().replace(f"{key}:\t{before}", f"{key}:\t{after}")
    if key == "drm-cycles-ccs":
        text = text.replace("drm-total-cycles-ccs:\t7655183225", "drm-total-cycles-ccs:\t11655183225")
    info.write_text(text)
    clock.ns += 250_000_000
    (g,) = reader.read({4242}).gpus
    assert g.proc_busy_pct == pytest.approx(share)


def test_a_vanished_clock_file_is_na_with_the_reason_and_the_rest_still_reads(tmp_path):
    tree = copy(BMG, tmp_path)
    reader = IntelSysfsReader(tree)
    (tree / "sys/class/drm/card1/device/tile0/gt0/freq0/act_freq").unlink()  # a GPU reset, mid-session
    (g,) = reader.read({4242}).gpus
    assert g.sm_clock_mhz is None and "act_freq: unreadable" in g.reason
    assert g.temp_c == 61.0 and g.proc_mem == 5242880 * 1024


def test_the_machines_reader_is_intels_where_only_intel_is_found_and_names_every_reason(tmp_path):
    assert isinstance(gpu_reader(root=BMG), IntelSysfsReader)
    none = gpu_reader(root=tmp_path)
    assert not none.ok and none.reason.startswith("n/a: ") and "AMD GPU" in none.reason and "no Intel GPU" in none.reason


def test_joules_per_token_from_the_hwmon_energy_counter_as_from_nvmls(tmp_path):
    from monitors.events import Step
    from monitors.sampler import Sampler, to_event
    from tui_app.core.session import Session

    tree = copy(BMG, tmp_path)
    sampler, session = Sampler(gpu=IntelSysfsReader(tree)), Session()
    session.feed(to_event(sampler.sample_once()))
    zero = {"forward_ns": 0, "kv_bytes": 0, "kv_alloc_bytes": 0, "seq_len": 0}
    session.feed(Step(run_id=1, step=1, kind="decode", token_ids=[], text="x", n_tokens=40, t_ns=1, dt_ns=1, **zero))
    (tree / "sys/class/drm/card1/device/hwmon/hwmon5/energy1_input").write_text(str(98765432100 + 12_000_000))  # 12 J
    session.feed(to_event(sampler.sample_once()))
    assert session.energy.joules_per_token() == pytest.approx(12 / 40)
    sampler.stop()


def test_each_runs_energy_a_token_in_its_row_its_json_and_the_table(tmp_path):
    """The hwmon counter's rise over a run's span, the power taken as even between two samples, over
    its tokens; and the J a token and tokens a second a watt (its inverse) where the table shows them."""
    import json

    from monitors.sampler import Sampler
    from tests.helpers.synthetic import energy_run
    from tui_app.core.columns import columns_for
    from tui_app.core.export import run_json
    from tui_app.core.session import Session

    tree = copy(BMG, tmp_path)
    energy = tree / "sys/class/drm/card1/device/hwmon/hwmon5/energy1_input"
    sampler, session = Sampler(gpu=IntelSysfsReader(tree)), Session()
    energy_run(session, sampler, energy)
    sampler.stop()
    (row,) = session.rows()
    assert row.energy_j == pytest.approx(2 + 3 + 0.8) and row.j_per_token == pytest.approx(5.8 / 20)
    assert json.loads(run_json(session, 1))["j_per_token"] == pytest.approx(0.29)
    assert {"J/token", "tok/s/W"} <= {c.title for c in columns_for([row])}
