"""The AMD probe on a fixture tree laid out as amdgpu's sysfs (tests/fixtures/sysfs/README.md):
each figure in its SI unit, a process's own VRAM from fdinfo, and a file that vanishes or reads
garbled turned into n/a with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

from monitors import drm_fdinfo
from monitors.amd_smi import Violations
from monitors.gpu_amd import AmdSysfsReader
from monitors.sampler import Sample, to_event
from monitors.system import SystemSample
from tests.helpers.fake_amdsmi import BEFORE_MI300, MI300_IDLE, AmdSmiLibraryException, fake_amdsmi

MI300X = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "mi300x"
DEVICE = "sys/class/drm/card1/device"


def two_mi300x(tmp_path: Path) -> Path:
    """The fixture with a second MI300X (PCI 0000:1c:00.0, 13 % busy), on which the process holds
    its VRAM."""
    tree = tmp_path / "two"
    shutil.copytree(MI300X, tree)
    second = tree / "sys/class/drm/card2/device"
    shutil.copytree(tree / DEVICE, second)
    (second / "uevent").write_text((second / "uevent").read_text().replace("0000:0c:00.0", "0000:1c:00.0"))
    (second / "gpu_busy_percent").write_text("13\n")
    for info in (tree / "proc/4242/fdinfo").glob("*"):
        info.write_text(info.read_text().replace("0000:0c:00.0", "0000:1c:00.0"))
    return tree


def test_each_figure_of_the_mi300x_in_its_unit():
    reader = AmdSysfsReader(MI300X)
    assert reader.ok and len(reader.devices) == 1  # the display connector beside the card is no device
    (g,) = reader.read({4242}).gpus
    assert g.name == "AMD Instinct MI300X" and g.reason == ""
    assert (g.sm_util, g.mem_util) == (87.0, 41.0)
    assert (g.mem_used, g.mem_total) == (61203283968, 192 * 2**30)
    assert g.power_w == 612.0 and g.sm_clock_mhz == 1420 and g.temp_c == 71.0  # the junction, the hottest point named
    assert g.proc_mem == 58720256 * 1024  # one client's VRAM, though two descriptors show it


def test_fdinfo_counts_each_client_once_and_only_amdgpus():
    assert drm_fdinfo.device_memory(drm_fdinfo.clients(MI300X, {4242})) == {"0000:0c:00.0": 58720256 * 1024}
    assert drm_fdinfo.clients(MI300X, {1}) == {}  # a process with no GPU descriptor
    assert AmdSysfsReader(MI300X).process_memory({4242, 1}) == 56 * 2**30


def test_a_vanished_or_garbled_file_is_na_with_the_reason_and_the_rest_still_reads(tmp_path):
    tree = tmp_path / "sys"
    shutil.copytree(MI300X, tree)
    reader = AmdSysfsReader(tree)
    (tree / DEVICE / "gpu_busy_percent").unlink()  # a GPU reset, mid-session
    (tree / DEVICE / "mem_info_vram_used").write_text("garbage\n")
    (g,) = reader.read().gpus
    assert g.sm_util is None and g.mem_used is None and "gpu_busy_percent: unreadable" in g.reason
    assert g.mem_total == 192 * 2**30 and g.power_w == 612.0 and g.proc_mem is None


def test_the_clock_falls_back_to_the_starred_dpm_level_and_power_to_its_average(tmp_path):
    tree = tmp_path / "sys"
    shutil.copytree(MI300X, tree)
    hwmon = tree / DEVICE / "hwmon" / "hwmon4"
    (hwmon / "freq1_input").unlink()
    (hwmon / "power1_average").write_text("550000000\n")
    (g,) = AmdSysfsReader(tree).read().gpus
    assert g.sm_clock_mhz == 1420 and g.power_w == 550.0  # the average where the driver has it


def test_no_amd_gpu_says_where_it_looked(tmp_path):
    reader = AmdSysfsReader(tmp_path)
    assert not reader.ok and reader.read().reason == f"n/a: no AMD GPU under {tmp_path}/sys/class/drm (amdgpu's sysfs)"


def test_the_samplers_event_takes_the_amd_figures_as_nvmls():
    reading = AmdSysfsReader(MI300X).read({4242})
    ev = to_event(Sample(1, {}, SystemSample(cpu_percent=1.0, mem_used=1, mem_total=2, mem_available=1, swap_used=0, per_core=[1.0]), reading))
    assert (ev.gpu_sm, ev.gpu_mem_used, ev.gpu_power_w, ev.gpu_sm_clock_mhz) == (87.0, 61203283968, 612.0, 1420)
    assert ev.gpu_proc_mem == 56 * 2**30 and ev.gpu_reason == ""


def test_the_engines_card_is_found_by_its_pci_address_whatever_hip_numbers_it(tmp_path):
    """Two MI300X; the process holds VRAM on the second alone (its fdinfo's drm-pdev). The figures
    follow that card, by PCI address: HIP_VISIBLE_DEVICES may call it device 0, and amdsmi orders
    devices otherwise, neither of which the probe reads."""
    reading = AmdSysfsReader(two_mi300x(tmp_path)).read({4242})
    assert [g.proc_mem for g in reading.gpus] == [0, 58720256 * 1024]
    ev = to_event(Sample(1, {}, SystemSample(cpu_percent=1.0, mem_used=1, mem_total=2, mem_available=1, swap_used=0, per_core=[1.0]), reading))
    assert ev.gpu_sm == 13.0 and ev.gpu_proc_mem == 56 * 2**30


def test_amdsmis_violation_status_names_what_holds_each_cards_clocks_down_by_pci_address(tmp_path):
    """amdsmi's own device order (the second card first) does not matter: each card's status is
    found by its PCI address. The engine's card is held down by its power cap and its HBM's heat:
    its sample says so, as NVML's clock events would, and the other card is held by nothing."""
    held = {**MI300_IDLE, "active_ppt_pwr": True, "active_hbm_thrm": True, "per_ppt_pwr": 37}
    smi = fake_amdsmi({"0000:1c:00.0": held, "0000:0c:00.0": MI300_IDLE})
    reader = AmdSysfsReader(two_mi300x(tmp_path), smi=Violations(load=lambda: smi))
    reading = reader.read({4242})
    assert [g.slowed for g in reading.gpus] == [[], ["power cap (PPT)", "HBM thermal"]]
    ev = to_event(Sample(1, {}, SystemSample(cpu_percent=1.0, mem_used=1, mem_total=2, mem_available=1, swap_used=0, per_core=[1.0]), reading))
    assert ev.gpu_slowed == "power cap (PPT), HBM thermal"
    reader.close()
    assert smi.calls["shut_down"] == 1


def test_without_amdsmi_or_its_driver_or_on_an_older_part_slowed_is_not_read_with_the_reason():
    def reason_and_slowed(violations: Violations) -> tuple[str, list | None]:
        slowed = AmdSysfsReader(MI300X, smi=violations).read().gpus[0].slowed
        return violations.reason, slowed

    assert reason_and_slowed(Violations(load=lambda: None)) == ("not read: the amdsmi package is not installed", None)
    no_rocm = OSError("libamd_smi.so: cannot open shared object file: No such file or directory")
    assert reason_and_slowed(Violations(load=lambda: no_rocm)) == (f"not read: amdsmi: {no_rocm}", None)
    no_driver = fake_amdsmi({"0000:0c:00.0": MI300_IDLE}, init_error="Error code:\n\t34 | AMDSMI_STATUS_DRIVER_NOT_LOADED")
    assert reason_and_slowed(Violations(load=lambda: no_driver)) == ("not read: amdsmi: Error code:\n\t34 | AMDSMI_STATUS_DRIVER_NOT_LOADED", None)
    older = fake_amdsmi({"0000:0c:00.0": BEFORE_MI300})
    assert reason_and_slowed(Violations(load=lambda: older)) == ("not reported by this part (amdsmi's violation status is MI300 and later)", None)
    reset = fake_amdsmi({"0000:0c:00.0": AmdSmiLibraryException("Error code:\n\t15 | AMDSMI_STATUS_NO_DATA")})
    assert reason_and_slowed(Violations(load=lambda: reset)) == ("not read: amdsmi's violation status: Error code:\n\t15 | AMDSMI_STATUS_NO_DATA", None)


def test_the_probe_says_why_a_folders_clocks_are_not_read_and_what_holds_them_live():
    """A fixture or a dump is a folder: amdsmi reads the live driver, so the probe says so there."""
    from monitors.probe import probe, text

    report = probe(MI300X, frozenset({4242}))
    (amd,) = [src for src in report["gpus"] if src["source"] == "amdgpu sysfs"]
    assert amd["devices"][0]["fields"]["slowed"] == {"value": None, "unit": "", "reason": "not read: amdsmi reads the live driver, not a folder"}
    assert "clocks held down by" in text(report) and "amdsmi reads the live driver" in text(report)
