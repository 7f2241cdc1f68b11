"""`tokentop probe`: each vendor's fixture read field by field in SI units with its source, what a
device does not report as n/a with the reason, a --dump that --root reads back the same, this
machine's own sources, and bad input as one line (docs/gpu.md, "Other vendors' GPUs")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitors import probe
from tests.helpers.fake_nvml import FakeNVML
from tui_app.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def probe_json(capsys, *args) -> dict:
    assert main(["probe", "-o", "json", *args]) == 0
    out, err = capsys.readouterr()
    return json.loads(out) | {"said": err}


def device(report: dict, source: str) -> dict:
    (found,) = [s for s in report["gpus"] if s["source"] == source]
    (one,) = found["devices"]
    return one


def test_each_vendors_fields_in_si_units_with_their_sources(capsys):
    amd = device(probe_json(capsys, "--root", str(FIXTURES / "mi300x"), "--pid", "4242"), "amdgpu sysfs")["fields"]
    assert amd["power_w"] == {"value": 612.0, "unit": "W", "source": "hwmon power1_average, else power1_input"}
    assert amd["sm_clock_mhz"]["value"] == 1420e6 and amd["sm_clock_mhz"]["unit"] == "Hz"
    assert amd["mem_total"]["value"] == 192 * 2**30 and amd["proc_mem"]["value"] == 56 * 2**30
    xe = device(probe_json(capsys, "--root", str(FIXTURES / "bmg_xe"), "--pid", "4242"), "i915/xe sysfs")["fields"]
    assert xe["energy_mj"]["value"] == pytest.approx(98765.432) and xe["energy_mj"]["unit"] == "J"
    assert xe["sm_util"]["value"] is None and "PMU" in xe["sm_util"]["reason"]
    assert xe["power_w"]["reason"] == "a rise between two readings, and a folder's counters stand still"
    no_pid = device(probe_json(capsys, "--root", str(FIXTURES / "bmg_xe")), "i915/xe sysfs")["fields"]
    assert no_pid["proc_mem"] == {"value": None, "unit": "B", "reason": "no process named (--pid)"}


def test_the_text_names_every_source_and_each_reason(capsys):
    assert main(["probe", "--root", str(FIXTURES / "arc_i915"), "--pid", "4242"]) == 0
    out = capsys.readouterr().out
    assert "NVML: n/a: no nvml.json in this folder" in out and "amdgpu sysfs: n/a: no AMD GPU" in out
    assert "i915/xe sysfs: GPU 0 Intel GPU 8086:56A0 (i915)" in out and "2400 MHz" in out and "6.00 GiB" in out
    assert "CPU energy, RAPL (powercap): n/a: no RAPL package" in out


@pytest.mark.parametrize("name", ["mi300x", "arc_i915", "bmg_xe"])
def test_a_dump_reads_back_as_the_tree_it_was_taken_from(capsys, tmp_path, name):
    out = tmp_path / "dump"
    before = probe_json(capsys, "--root", str(FIXTURES / name), "--pid", "4242", "--dump", str(out))
    assert f"files the probes read, under {out}" in before["said"]
    after = probe_json(capsys, "--root", str(out), "--pid", "4242")
    assert [s["devices"] for s in after["gpus"]] == [s["devices"] for s in before["gpus"]] and any(s["devices"] for s in after["gpus"])
    assert not (out / "proc" / "4242" / "fdinfo" / "0").exists()  # a descriptor that is no GPU's is not copied


def test_a_macs_dumped_ioregistry_reads_back_anywhere(capsys, tmp_path):
    mac = tmp_path / "mac"
    mac.mkdir()
    (mac / "ioreg.plist").write_bytes((FIXTURES.parent / "apple" / "ioreg-m2max.plist").read_bytes())
    before = probe_json(capsys, "--root", str(mac), "--dump", str(tmp_path / "again"))
    fields = device(before, "Apple IORegistry")["fields"]
    assert fields["sm_util"]["value"] == 64.0 and fields["mem_used"]["value"] == 9663676416
    assert fields["power_w"]["reason"] == "not read (macmon's lines are the live Mac's, not a folder's)"
    assert device(probe_json(capsys, "--root", str(tmp_path / "again")), "Apple IORegistry") == device(before, "Apple IORegistry")


def test_nvmls_figures_are_dumped_and_read_back_as_nvml_read_them(capsys, tmp_path):
    """No file holds NVML's figures, so a dump writes what it read (nvml.json). No NVIDIA GPU here:
    the stand-in NVML (tests/helpers/fake_nvml.py) is what a dump on a GPU box reads; the GPU check
    runs the same on a real one."""
    out, pid = tmp_path / "dump", frozenset({4242})
    nvml = FakeNVML(n=2, procs={0: [(4242, 3 * 2**30)]})
    assert probe.dump("/", out, pid, nvml=nvml) >= 1 and (out / "nvml.json").is_file()
    (live,) = [s for s in probe.probe("/", pid, 0, nvml=nvml, sleep=lambda s: None)["gpus"] if s["source"] == "NVML"]
    (back,) = [s for s in probe_json(capsys, "--root", str(out), "--pid", "4242")["gpus"] if s["source"] == "NVML"]
    assert back["ok"] and [d["name"] for d in back["devices"]] == ["NVIDIA Fake H100"] * 2
    for a, b in zip(live["devices"], back["devices"], strict=True):
        for key, f in a["fields"].items():
            assert b["fields"][key]["value"] == f["value"], key
            assert b["fields"][key].get("source") == (f["source"] + " (dumped)" if f["value"] is not None else None)
    assert back["devices"][0]["fields"]["proc_mem"]["value"] == 3 * 2**30 and back["devices"][0]["fields"]["power_w"]["value"] == 250.0


@pytest.mark.parametrize(
    "text,why",
    [("{", "unreadable"), ('{"gpus": [{"index": 0, "power_w": "hot"}]}', "power_w is 'hot', not a number"), ('{"gpus": []}', "holds no GPU")],
)
def test_a_garbled_nvml_dump_is_na_with_the_reason(capsys, tmp_path, text, why):
    (tmp_path / "nvml.json").write_text(text)
    (nv,) = [s for s in probe_json(capsys, "--root", str(tmp_path))["gpus"] if s["source"] == "NVML"]
    assert not nv["ok"] and nv["reason"].startswith("n/a: ") and why in nv["reason"]


def test_this_machines_own_sources_are_read_live(capsys, tmp_path):
    """Here: whatever NVML, amdgpu, i915/xe and RAPL say of this machine, each ok or with a reason;
    this process's fdinfo is real and holds no GPU client, so the dump copies none of it."""
    report = probe_json(capsys, "--pid", str(os.getpid()), "--interval", "0.05", "--dump", str(tmp_path / "d"))
    assert [s["source"] for s in report["gpus"]] == ["NVML", "amdgpu sysfs", "i915/xe sysfs", "Apple IORegistry"]
    for s in report["gpus"]:
        assert s["ok"] or s["reason"].startswith("n/a: ")
    assert not (tmp_path / "d" / "proc").exists()
    cpu = report["cpu_energy"]
    if not Path("/sys/class/powercap").is_dir():
        assert cpu["reason"].startswith("n/a: no RAPL package")
        pytest.skip("this machine has no RAPL counters (/sys/class/powercap): the live CPU energy is read only where it has")
    assert cpu["reason"] or (cpu["energy_j"] > 0 and cpu["power_w"] is not None and cpu["power_w"] >= 0)


def test_bad_input_is_one_line(capsys, tmp_path):
    assert main(["probe", "--root", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"tokentop: --root {tmp_path / 'nowhere'}: no such folder"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    assert main(["probe", "--dump", str(tmp_path / "full")]) == 2
    assert "not empty; name a new folder" in capsys.readouterr().err
    assert (tmp_path / "full" / "x").read_text() == "mine"
    assert main(["probe", "--dump", str(tmp_path / "full" / "x")]) == 2
    assert "a file; name a new folder" in capsys.readouterr().err


def test_a_reader_that_stops_early_gets_no_traceback():
    """`tokentop probe -o json | head`: the reader gone before the write (its end closed here first)."""
    cmd = [sys.executable, "-m", "tui_app", "probe", "-o", "json", "--root", str(FIXTURES / "mi300x")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1 and "Traceback" not in err, err
