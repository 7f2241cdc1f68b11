"""What each probe reads on this machine (`tokentop probe`): every vendor's GPU reader and the CPU's
energy counter, each field with its value in SI units and its source, or n/a with the reason; and
the files they read copied into a folder laid out as the system (`--dump`), which `--root` reads
back: a user on hardware this project cannot run sends that folder with a report."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from monitors import gpu_apple
from monitors.gpu import NVML_DUMP, NvmlReader, nvml_dump
from monitors.gpus import readers
from monitors.rapl import RaplReader

# (field, label, unit, factor to SI) in the order the text shows them
FIELDS = (
    ("sm_util", "busy", "%", 1),
    ("mem_util", "memory busy", "%", 1),
    ("mem_used", "memory used", "B", 1),
    ("mem_total", "memory total", "B", 1),
    ("proc_mem", "watched processes' memory", "B", 1),
    ("proc_busy_pct", "watched processes' busy", "%", 1),
    ("power_w", "power", "W", 1),
    ("energy_mj", "energy counter", "J", 1e-3),
    ("sm_clock_mhz", "clock", "Hz", 1e6),
    ("mem_clock_mhz", "memory clock", "Hz", 1e6),
    ("temp_c", "temperature", "°C", 1),
)
# What the probes read, relative to the root: --dump copies these and nothing else
DUMPED = (
    "sys/class/drm/card*/device/{vendor,device,uevent,product_name,gpu_busy_percent,mem_busy_percent}",
    "sys/class/drm/card*/device/{mem_info_vram_used,mem_info_vram_total,pp_dpm_sclk}",
    "sys/class/drm/card*/device/hwmon/hwmon*/{name,*_input,*_label,*_average}",
    "sys/class/drm/card*/device/tile*/gt*/freq0/{act_freq,cur_freq}",
    "sys/class/drm/card*/gt_act_freq_mhz",
    "sys/class/powercap/intel-rapl:*/{name,energy_uj,max_energy_range_uj}",
    "ioreg.plist",  # a dump's own, dumped again
    NVML_DUMP,  # likewise
)


def _device(reader, sample, pids: frozenset[int], live: bool) -> dict:
    fields = {}
    for key, _, unit, factor in FIELDS:
        value = getattr(sample, key)
        if value is not None:
            fields[key] = {"value": value * factor, "unit": unit, "source": reader.sources.get(key, "")}
            continue
        if key.startswith("proc_") and not pids:
            why = "no process named (--pid)"
        elif key in reader.rises and not live:  # a counter's rise between two readings
            why = "a rise between two readings, and a folder's counters stand still"
        elif key == "proc_busy_pct" and key in reader.rises:
            why = "no client of the processes on this GPU"
        else:
            why = reader.not_reported.get(key) or (f"not read ({sample.reason})" if sample.reason else "not reported by this device")
        fields[key] = {"value": None, "unit": unit, "reason": why}
    # What holds the clocks down now: a list of reasons (empty: nothing), not a figure
    if sample.slowed is not None:
        fields["slowed"] = {"value": sample.slowed, "unit": "", "source": reader.sources.get("slowed", "")}
    else:
        fields["slowed"] = {"value": None, "unit": "", "reason": reader.not_reported.get("slowed") or "not reported by this device"}
    return {"index": sample.index, "name": sample.name, "fields": fields}


def probe(root: str | Path = "/", pids: frozenset[int] = frozenset(), interval_s: float = 0.5, nvml=None, sleep=time.sleep) -> dict:
    """Each source's reading as plain data: {"gpus": [...], "cpu_energy": {...}}. On this machine
    (root "/") the second of two `interval_s` apart, as power and busy shares are rises between
    readings; from a folder, one reading, NVML's from the figures a dump wrote there."""
    live = Path(root) == Path("/")
    every, rapl = readers(nvml, root), RaplReader(root)
    if live:
        for r in every:
            if r.ok:
                r.read(pids)
        rapl.read()
        sleep(interval_s)
    gpus = []
    for r in every:
        reading = r.read(pids) if r.ok else None
        gpus.append({"source": r.name, "ok": r.ok, "reason": r.reason, "devices": [_device(r, g, pids, live) for g in reading.gpus] if reading else []})
        r.close()
    cpu = rapl.read()
    return {"root": str(root), "pids": sorted(pids), "gpus": gpus, "cpu_energy": {"source": "RAPL (powercap)", **asdict(cpu)}}


def text(report: dict) -> str:
    lines = []
    for src in report["gpus"]:
        if not src["ok"]:
            lines.append(f"{src['source']}: {src['reason']}")
            continue
        for d in src["devices"]:
            lines.append(f"{src['source']}: GPU {d['index']} {d['name']}")
            for key, label, _, _ in FIELDS:
                f = d["fields"][key]
                shown = _shown(f["value"], f["unit"]) if f["value"] is not None else "n/a"
                lines.append(f"  {label:<26} {shown:>12}  {f.get('source') or f.get('reason')}")
            f = d["fields"]["slowed"]
            shown = (", ".join(f["value"]) or "nothing") if f["value"] is not None else "n/a"
            lines.append(f"  {'clocks held down by':<26} {shown:>12}  {f.get('source') or f.get('reason')}")
    cpu = report["cpu_energy"]
    if cpu["reason"]:
        lines.append(f"CPU energy, {cpu['source']}: {cpu['reason']}")
    else:
        power = f"{cpu['power_w']:.1f} W" if cpu["power_w"] is not None else "power n/a (one reading)"
        lines.append(f"CPU energy, {cpu['source']}: {cpu['packages']} package(s), {cpu['energy_j']:.1f} J since boot, {power}")
    return "\n".join(lines)


def _shown(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value / 2**30:.2f} GiB"
    if unit == "Hz":
        return f"{value / 1e6:.0f} MHz"
    return f"{value:.1f} {unit}"


def dump(root: str | Path, out: Path, pids: frozenset[int], nvml=None) -> int:
    """Copy what the probes read (DUMPED, and the processes' DRM fdinfo) from `root` into `out`,
    laid out the same, and live, what NVML reads (no file holds it); the number of files. Links are
    followed, so `out` holds plain files."""
    base, n = Path(root), 0
    if base == Path("/"):
        reader = NvmlReader(nvml)
        if reader.ok:
            out.mkdir(parents=True, exist_ok=True)
            (out / NVML_DUMP).write_text(nvml_dump(reader.read(pids)), encoding="utf-8")
            n += 1
        reader.close()
    if sys.platform == "darwin" and base == Path("/"):  # a Mac, live: its IORegistry's accelerators
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            plist = gpu_apple.ioreg()
            out.mkdir(parents=True, exist_ok=True)
            (out / "ioreg.plist").write_bytes(plist)
            n += 1
    patterns = [p for pattern in DUMPED for p in _braces(pattern)]
    patterns += [f"proc/{pid}/fdinfo/*" for pid in sorted(pids)]
    for pattern in patterns:
        for path in sorted(base.glob(pattern)):
            rel = path.relative_to(base)
            try:
                data = path.read_bytes()
            except OSError:
                continue  # root's alone, or gone: what the probe would read as n/a
            if rel.parts[0] == "proc" and b"drm-driver:" not in data:
                continue  # a descriptor that is not a GPU's
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
            n += 1
    return n


def _braces(pattern: str) -> list[str]:
    if "{" not in pattern:
        return [pattern]
    head, rest = pattern.split("{", 1)
    choices, tail = rest.split("}", 1)
    return [head + c + tail for c in choices.split(",")]
