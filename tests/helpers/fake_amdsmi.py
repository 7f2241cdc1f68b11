"""A stand-in for the `amdsmi` package (ROCm's py-interface/amdsmi_interface.py), for the one call
tokentop makes of it, where no AMD GPU or driver is at hand: the calls it makes, their return
shapes ("N/A" for a field the part does not report; bools for the active_* flags), and its
exceptions. `devices` maps each GPU's PCI address (its bdf) to the violation status it reports, in
amdsmi's own order; `init_error`, a message amdsmi_init raises as the library does without a
driver."""

from __future__ import annotations

from types import ModuleType


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    pass


MI300_IDLE = {
    "acc_ppt_pwr": 0,
    "per_ppt_pwr": 0,
    "active_prochot_thrm": False,
    "active_ppt_pwr": False,
    "active_socket_thrm": False,
    "active_vr_thrm": False,
    "active_hbm_thrm": False,
}
BEFORE_MI300 = dict.fromkeys(MI300_IDLE, "N/A")  # gpu_metrics before 1.6: every field unsupported


def fake_amdsmi(devices: dict[str, dict], init_error: str = "") -> ModuleType:
    module = ModuleType("amdsmi")
    handles = {object(): bdf for bdf in devices}
    calls = {"shut_down": 0}

    def amdsmi_init(flag=None):
        if init_error:
            raise AmdSmiLibraryException(init_error)

    def amdsmi_get_violation_status(handle):
        status = devices[handles[handle]]
        if isinstance(status, Exception):
            raise status
        return dict(status)

    def amdsmi_shut_down():
        calls["shut_down"] += 1

    module.__dict__.update(
        AmdSmiException=AmdSmiException,
        AmdSmiLibraryException=AmdSmiLibraryException,
        amdsmi_init=amdsmi_init,
        amdsmi_get_processor_handles=lambda: list(handles),
        amdsmi_get_gpu_device_bdf=lambda handle: handles[handle],
        amdsmi_get_violation_status=amdsmi_get_violation_status,
        amdsmi_shut_down=amdsmi_shut_down,
        calls=calls,
    )
    return module
