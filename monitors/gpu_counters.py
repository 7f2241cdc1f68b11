"""NVML's GPM counters and clock-event (throttle) reasons for one GPU: what the utilization % of
`nvmlDeviceGetUtilizationRates` cannot say. Its "GPU %" is the share of time any kernel ran; GPM
(Hopper and later) measures the share of DRAM bandwidth used, of SMs busy and of SMs on tensor
cores, over the interval between two of its samples. The clock-event reasons say why the clocks
are below their maximum (power cap, thermal, the board's slowdown signal) while they are.

Neither raises: a GPU without GPM (before Hopper, or a MIG slice) reads None, as does a driver
too old for the clock-event query.
"""

from __future__ import annotations

import contextlib

# NVML's metric ids (nvml.h, NVML_GPM_METRIC_*), by the names tokentop gives them.
GPM_METRICS = {"sm_active_pct": 2, "tensor_pct": 5, "dram_pct": 10}
# NVML's clock-event reason bits (nvml.h, nvmlClocksEventReason*). Idle is left out: a GPU with no
# work drops its clocks, which slows nothing; the application-clocks setting is a user's own cap.
CLOCK_EVENTS = {
    0x4: "power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "power brake",
    0x100: "display clock",
}


def clock_events(nvml, handle) -> list[str] | None:
    """The reasons the GPU's clocks are held down now, by NVML; None where it cannot say."""
    query = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    if query is None:
        return None
    try:
        bits = int(query(handle))
    except Exception:  # noqa: BLE001 - NotSupported on a virtual GPU, as any other failure
        return None
    return [name for bit, name in CLOCK_EVENTS.items() if bits & bit]


class Gpm:
    """GPM of one GPU: each `read` takes a sample and returns the metrics over the interval since
    the previous one (the first read: None). `supported` is False where the GPU has none."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.samples: list = []
        self.primed = False
        try:
            self.supported = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            if self.supported:
                self.samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except Exception:  # noqa: BLE001 - a driver or pynvml without GPM
            self.supported = False

    def read(self) -> dict[str, float] | None:
        if not self.supported:
            return None
        nv = self.nvml
        try:
            nv.nvmlGpmSampleGet(self.handle, self.samples[1])
        except Exception:  # noqa: BLE001 - a GPU lost, or GPM turned off meanwhile
            self.primed = False
            return None
        if not self.primed:
            self.primed = True
            self.samples.reverse()
            return None
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version, get.numMetrics = nv.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS)
        get.sample1, get.sample2 = self.samples[0], self.samples[1]
        for i, metric in enumerate(GPM_METRICS.values()):
            get.metrics[i].metricId = metric
        self.samples.reverse()  # this sample starts the next interval
        try:
            nv.nvmlGpmMetricsGet(get)
        except Exception:  # noqa: BLE001 - as above
            return None
        return {name: float(get.metrics[i].value) for i, name in enumerate(GPM_METRICS) if get.metrics[i].nvmlReturn == 0}

    def close(self) -> None:
        for sample in self.samples:
            with contextlib.suppress(Exception):  # freeing on a lost GPU is best effort
                self.nvml.nvmlGpmSampleFree(sample)
        self.samples, self.supported = [], False
