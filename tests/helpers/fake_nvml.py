"""A stand-in for the pynvml module, for machines without an NVIDIA GPU.

It mirrors the parts of NVML's Python API that monitors.gpu uses, including the error classes
(NVMLError with .value, and the subclasses pynvml generates per error code), so the failure
paths are exercised the way the real library raises them.
"""

import ctypes
from types import SimpleNamespace

from pynvml import NVML_GPM_METRICS_GET_VERSION, c_nvmlGpmMetricsGet_t, c_nvmlGpmSample_t, nvmlMemory_v2  # the real structs: what NVML fills

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
}


class NVMLError(Exception):
    def __init__(self, value):
        self.value = value

    def __str__(self):
        return _STRINGS.get(self.value, f"Unknown Error {self.value}")


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self):
        super().__init__(NVML_ERROR_GPU_IS_LOST)


def nvmlErrorString(value):
    return _STRINGS.get(value, f"Unknown Error {value}")


class FakeNVML:
    """Configurable: devices, a failure at init, per-device loss, unsupported queries."""

    def __init__(self, n=2, init_error=None, unsupported=(), procs=None, gpm=None):
        self.n = n
        # GPM: GPU index → {metric id: value}, the figures of every interval; a GPU not here has no GPM
        self.gpm = gpm or {}
        self.clock_events = dict.fromkeys(range(n), 0)  # NVML's reason bits, set by a test
        self.gpm_samples: dict[int, int] = {}  # a sample's id → its GPU, while allocated
        self.c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t
        self.NVML_GPM_METRICS_GET_VERSION = NVML_GPM_METRICS_GET_VERSION
        self.energy_mj = {h: 5_000_000 + h for h in range(n)}  # a test advances it as a GPU would draw
        self.init_error = init_error
        self.lost: set[int] = set()
        self.unsupported = set(unsupported)
        self.procs = procs or {}
        self.calls = 0
        self.shutdown_called = False
        # Module-like attributes
        self.NVMLError = NVMLError
        self.NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
        self.NVML_CLOCK_SM = NVML_CLOCK_SM
        self.NVML_CLOCK_MEM = NVML_CLOCK_MEM
        self.nvmlMemory_v2 = nvmlMemory_v2
        # What the driver keeps for itself: v1 of the memory query counts it as used, v2 and nvidia-smi do not
        self.reserved = 615 * 2**20
        self.nvmlErrorString = nvmlErrorString

    def nvmlInit(self):
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        if i in self.lost:
            raise NVMLError_GpuIsLost()
        return i

    def _check(self, name, h):
        self.calls += 1
        if h in self.lost:
            raise NVMLError_GpuIsLost()
        if name in self.unsupported:
            raise NVMLError_NotSupported()

    def nvmlDeviceGetName(self, h):
        self._check("name", h)
        return b"NVIDIA Fake H100"

    def nvmlDeviceGetUtilizationRates(self, h):
        self._check("util", h)
        return SimpleNamespace(gpu=40 + h, memory=20 + h)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self._check("mem", h)
        used, total = (1 + h) * 2**30, 80 * 2**30
        if version is None:
            return SimpleNamespace(used=used + self.reserved, total=total, free=total - used - self.reserved)
        if "mem_v2" in self.unsupported:  # a driver older than the _v2 call
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(version=version, used=used, reserved=self.reserved, total=total, free=total - used - self.reserved)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._check("procs", h)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.procs.get(h, [])]

    def nvmlDeviceGetPowerUsage(self, h):
        self._check("power", h)
        return 250_000 + h  # milliwatts

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._check("temp", h)
        return 55

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._check("energy", h)
        return self.energy_mj[h]

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._check("clock", h)
        return 1980 if kind == NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._check("clock_events", h)
        return self.clock_events[h]

    def nvmlGpmQueryDeviceSupport(self, h):
        self._check("gpm", h)
        return SimpleNamespace(isSupportedDevice=int(h in self.gpm))

    def nvmlGpmSampleAlloc(self):
        """An opaque sample handle, as NVML's: a pointer never followed, its address its id."""
        key = max(self.gpm_samples, default=0) + 16
        self.gpm_samples[key] = -1
        return ctypes.cast(ctypes.c_void_p(key), c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample):
        del self.gpm_samples[_key(sample)]

    def nvmlGpmSampleGet(self, h, sample):
        self._check("gpm", h)
        self.gpm_samples[_key(sample)] = h
        return sample

    def nvmlGpmMetricsGet(self, get):
        """Fills the real struct as NVML does: each asked metric's value and its own return code."""
        assert get.version == NVML_GPM_METRICS_GET_VERSION
        h = self.gpm_samples[_key(get.sample2)]
        assert self.gpm_samples[_key(get.sample1)] == h and get.sample1 != get.sample2, "two samples of the same GPU"
        for i in range(get.numMetrics):
            m = get.metrics[i]
            value = self.gpm[h].get(m.metricId)
            m.nvmlReturn, m.value = (NVML_SUCCESS, value) if value is not None else (NVML_ERROR_NOT_SUPPORTED, 0.0)
        return get


def _key(sample) -> int:
    return ctypes.cast(sample, ctypes.c_void_p).value
