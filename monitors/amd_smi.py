"""amdsmi's violation status, where the `amdsmi` package imports and its library finds the driver:
what holds an MI300-class GPU's clocks down now (package power, socket, HBM or voltage-regulator
temperature, PROCHOT), as NVML's clock events do on NVIDIA. ROCm's docs: gpu_metrics 1.6 and
later (MI300 and newer) report it; older parts' fields read "N/A", or the call is refused.

Optional: without the package nothing is read and the sysfs figures stand alone; with it but no
driver (or no permission), the reason, once, and no traceback. amdsmi orders its devices its own
way (not HIP's), so a card is found by its PCI address (`amdsmi_get_gpu_device_bdf`)."""

from __future__ import annotations

import contextlib
import importlib

ACTIVE = {
    "active_ppt_pwr": "power cap (PPT)",
    "active_socket_thrm": "socket thermal",
    "active_hbm_thrm": "HBM thermal",
    "active_vr_thrm": "VR thermal",
    "active_prochot_thrm": "PROCHOT",
}


def _load():
    """The package, or None where it is not installed; its import loads ROCm's libamd_smi.so, so
    one installed without ROCm raises OSError, said as its own reason."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError:
        return None
    except OSError as exc:
        return exc


class Violations:
    def __init__(self, load=_load):
        self.smi = None
        self.reason = "not read: the amdsmi package is not installed"
        self.handles: dict[str, object] = {}  # PCI address → amdsmi's processor handle
        smi = load()
        if smi is None:
            return
        if isinstance(smi, OSError):
            self.reason = f"not read: amdsmi: {str(smi).strip()[:120]}"
            return
        self.errors = getattr(smi, "AmdSmiException", Exception)
        try:
            smi.amdsmi_init()
            self.handles = {str(smi.amdsmi_get_gpu_device_bdf(h)).lower(): h for h in smi.amdsmi_get_processor_handles()}
        except self.errors as exc:
            self.reason = f"not read: amdsmi: {str(exc).strip()[:120] or type(exc).__name__}"
            return
        self.smi, self.reason = smi, ""

    def slowed(self, bus: str) -> list[str] | None:
        """What holds the clocks of the card at PCI address `bus` down now; None where not read."""
        handle = self.handles.get(bus.lower())
        if self.smi is None or handle is None:
            return None
        try:
            status = self.smi.amdsmi_get_violation_status(handle)
        except self.errors as exc:  # before MI300, or the GPU reset under us
            self.reason = f"not read: amdsmi's violation status: {str(exc).strip()[:120] or type(exc).__name__}"
            return None
        flags = {key: status.get(key) for key in ACTIVE}
        if not any(isinstance(v, bool) for v in flags.values()):  # every field "N/A": a part without it
            self.reason = "not reported by this part (amdsmi's violation status is MI300 and later)"
            return None
        return [why for key, why in ACTIVE.items() if flags[key] is True]

    def close(self) -> None:
        if self.smi is not None:
            with contextlib.suppress(self.errors):
                self.smi.amdsmi_shut_down()
            self.smi = None
