"""A stand-in for the pynvml module: devices are dicts of values, an exception class as a value
raises it, and every call is counted. Error classes and constants come from the real pynvml."""

from __future__ import annotations

import ctypes
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pynvml


def proc(pid: int, mem: int | None) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=mem)


def default_device(index: int = 0) -> dict[str, Any]:
    return {
        "name": f"Stub GPU {index}",
        "uuid": f"GPU-stub-{index}",
        "bus": f"00000000:{index + 1:02X}:00.0",
        "util": SimpleNamespace(gpu=42, memory=17),
        "mem": SimpleNamespace(used=3 * 1024**3, total=16 * 1024**3, free=13 * 1024**3),
        "temp": 55,
        "power_mw": 123_456,
        "limit_mw": 300_000,
        "fan": 30,
        "clock_sm": 1410,
        "clock_mem": 1215,
        "pstate": 2,
        "pcie_kb": {pynvml.NVML_PCIE_UTIL_TX_BYTES: 100, pynvml.NVML_PCIE_UTIL_RX_BYTES: 2000},
        "enc": [5, 1000],
        "dec": [0, 1000],
        "nvlink_links": 0,
        "nvlink_kib": (0, 0),
        "compute": [],
        "graphics": [],
        "proc_util": [],
        "energy_mj": 5_000_000,
        "gpm_supported": False,
        "gpm": {},
    }


def gpm_device(index: int = 0) -> dict[str, Any]:
    """A Hopper: GPM metrics by id (SM activity 2, occupancy 3, tensor 5, DRAM 10, PCIe TX 20 /
    RX 21 in MiB/s); NVLink ids 60/61 absent, as on a PCIe card."""
    device = default_device(index)
    device["gpm_supported"] = True
    device["gpm"] = {2: 37.5, 3: 12.25, 5: 20.0, 10: 55.0, 20: 100.0, 21: 250.0}
    return device


class StubNvml:
    def __init__(self, devices: list[dict[str, Any]] | None = None, init_error: Any = None):
        self.devices = devices if devices is not None else [default_device(0)]
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.shutdowns = 0
        self.proc_util_since: list[int] = []
        self._gpm_buffers: dict[int, tuple[ctypes.c_int, int | None, int]] = {}
        """A GPM sample buffer's address -> (its memory, the device it sampled, when)."""
        self._gpm_tick = 0
        self.gpm_freed = 0

    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _get(self, fn: str, h: int, key: str) -> Any:
        self.calls[fn] += 1
        value = self.devices[h][key]
        if isinstance(value, type) and issubclass(value, BaseException):
            raise value(0) if issubclass(value, pynvml.NVMLError) else value()
        return value

    # -- library --
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error(0)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        """A GPU's handle is its index; a MIG instance's (listed in ``"mig"``) is a tuple."""
        for i, d in enumerate(self.devices):
            if d["uuid"] == uuid:
                return i
            if uuid in d.get("mig", ()):
                return ("mig", i, uuid)
        raise pynvml.NVMLError_NotFound(0)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> int:
        if not isinstance(h, tuple):
            raise pynvml.NVMLError_InvalidArgument(0)
        return int(h[1])

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    # -- device --
    def nvmlDeviceGetName(self, h: int) -> str:
        return self._get("name", h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._get("uuid", h, "uuid")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._get("pci", h, "bus").encode())

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return self._get("util", h, "util")

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return self._get("mem", h, "mem")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._get("temp", h, "temp")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._get("power", h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._get("limit", h, "limit_mw")

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._get("fan", h, "fan")

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        key = "clock_sm" if clock == pynvml.NVML_CLOCK_SM else "clock_mem"
        return self._get(key, h, key)

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return self._get("pstate", h, "pstate")

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return self._get("pcie", h, "pcie_kb")[counter]

    def nvmlDeviceGetEncoderUtilization(self, h: int) -> list[int]:
        return self._get("enc", h, "enc")

    def nvmlDeviceGetDecoderUtilization(self, h: int) -> list[int]:
        return self._get("dec", h, "dec")

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self.calls["nvlink_state"] += 1
        n = self.devices[h]["nvlink_links"]
        if n == 0:
            raise pynvml.NVMLError_NotSupported(0)
        return 1 if link < n else 0

    def nvmlDeviceGetFieldValues(self, h: int, fields: list[tuple[int, int]]) -> list[Any]:
        self.calls["fields"] += 1
        tx, rx = self.devices[h]["nvlink_kib"]
        n = self.devices[h]["nvlink_links"]
        out = []
        for field_id, _link in fields:
            total = tx if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else rx
            out.append(SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=total // n)))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self._get("compute", h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return self._get("graphics", h, "graphics")

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[Any]:
        self.proc_util_since.append(since)
        samples = self._get("proc_util", h, "proc_util")
        if not samples:
            raise pynvml.NVMLError_NotFound(0)
        return [s for s in samples if s.timeStamp > since]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._get("energy", h, "energy_mj")

    # -- GPM: a sample buffer is real memory, so a request names its two samples by address --
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self._get("gpm_support", h, "gpm_supported")))

    def nvmlGpmSampleAlloc(self) -> Any:
        self.calls["gpm_alloc"] += 1
        memory = ctypes.c_int(0)
        address = ctypes.addressof(memory)
        self._gpm_buffers[address] = (memory, None, -1)
        return ctypes.cast(address, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.gpm_freed += 1
        del self._gpm_buffers[ctypes.cast(sample, ctypes.c_void_p).value or 0]

    def nvmlGpmSampleGet(self, h: int, sample: Any) -> Any:
        self._get("gpm_sample", h, "gpm")
        address = ctypes.cast(sample, ctypes.c_void_p).value or 0
        self._gpm_tick += 1
        self._gpm_buffers[address] = (self._gpm_buffers[address][0], h, self._gpm_tick)
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        """Each metric the device lists (the same whatever the interval); the others fail
        NotSupported in their own ``nvmlReturn``, as NVML does."""
        _, h1, t1 = self._gpm_buffers[ctypes.cast(request.sample1, ctypes.c_void_p).value or 0]
        _, h2, t2 = self._gpm_buffers[ctypes.cast(request.sample2, ctypes.c_void_p).value or 0]
        if h1 is None or h1 != h2 or not t1 < t2:
            raise pynvml.NVMLError_InvalidArgument(0)  # samples out of order, or of two GPUs
        values = self._get("gpm_metrics", h2, "gpm")
        for i in range(request.numMetrics):
            m = request.metrics[i]
            if m.metricId in values:
                m.value, m.nvmlReturn = values[m.metricId], 0
            else:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request
