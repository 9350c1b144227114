"""NVML's GPU performance metrics (GPM, Hopper and later): SM activity and occupancy, tensor-core
activity, DRAM bandwidth use, PCIe and NVLink rates, measured between two GPM samples.
"""

from __future__ import annotations

import logging
from types import ModuleType

from gpuwatch.monitor.nvml._query import Query

log = logging.getLogger("gpuwatch.monitor.nvml")

_MIB = 1024 * 1024

#: Our field -> (pynvml's metric constant, its id as of nvml.h 12.x for bindings without it).
METRICS: dict[str, tuple[str, int]] = {
    "sm_active_pct": ("NVML_GPM_METRIC_SM_UTIL", 2),
    "sm_occupancy_pct": ("NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    "tensor_active_pct": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
    "dram_active_pct": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
    "pcie_tx_mib_per_s": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20),
    "pcie_rx_mib_per_s": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21),
    "nvlink_rx_mib_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 60),
    "nvlink_tx_mib_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 61),
}

NO_GPM = (
    "GPU %d has no GPM (NVML's GPU performance metrics, Hopper and later): SM activity, "
    "occupancy and tensor activity are not known there; utilisation is shown instead"
)


class GpmReader:
    """Per GPU, two GPM sample buffers used in turn: each :meth:`read` takes a new sample and
    returns the metrics between it and the one before (empty on the first read)."""

    def __init__(self, nvml: ModuleType, query: Query) -> None:
        self._nvml = nvml
        self._q = query
        self._supported: dict[int, bool] = {}
        self._buffers: dict[int, list[object]] = {}
        self._primed: set[int] = set()
        self._ids = [int(getattr(nvml, const, default)) for const, default in METRICS.values()]
        self.latest: dict[int, dict[str, float | None]] = {}
        """Each GPU's latest metrics (the PCIe thread reads its rates from here)."""

    def supported(self, index: int, handle: object) -> bool:
        found = self._supported.get(index)
        if found is None:
            support = self._q(index, "nvmlGpmQueryDeviceSupport", handle)
            found = bool(getattr(support, "isSupportedDevice", 0))
            if not found:
                log.warning(NO_GPM, index)
            self._supported[index] = found
        return found

    def read(self, index: int, handle: object) -> dict[str, float | None]:
        """The metrics since the previous read; empty where there are none (yet)."""
        if not self.supported(index, handle):
            return {}
        q = self._q
        buffers = self._buffers.get(index)
        if buffers is None:
            buffers = [q(index, "nvmlGpmSampleAlloc"), q(index, "nvmlGpmSampleAlloc")]
            if None in buffers:
                self._supported[index] = False
                return {}
            self._buffers[index] = buffers
        if q(index, "nvmlGpmSampleGet", handle, buffers[1]) is None:
            if q.is_unsupported(index, "nvmlGpmSampleGet"):
                # NB: a GPU split into MIG instances has GPM per instance only, not for itself.
                self._supported[index] = False
                log.warning(NO_GPM, index)
            return {}
        if index not in self._primed:
            self._primed.add(index)
            buffers.reverse()  # the sample just taken is the next read's "before"
            return {}
        got = q(index, "nvmlGpmMetricsGet", self._request(buffers[0], buffers[1]))
        buffers.reverse()
        if got is None:
            return {}
        out: dict[str, float | None] = {}
        for i, name in enumerate(METRICS):
            m = got.metrics[i]
            # NB: a metric the GPU lacks (NVLink on a PCIe card) fails alone, in its nvmlReturn.
            out[name] = float(m.value) if m.nvmlReturn == 0 else None
        self.latest[index] = out
        return out

    def _request(self, before: object, after: object) -> object:
        nvml = self._nvml
        req = nvml.c_nvmlGpmMetricsGet_t()
        req.version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))
        req.numMetrics = len(self._ids)
        req.sample1, req.sample2 = before, after
        for i, metric_id in enumerate(self._ids):
            req.metrics[i].metricId = metric_id
        return req

    def pcie(self, index: int) -> tuple[int | None, int | None] | None:
        """``(tx, rx)`` bytes/s from the latest GPM read; None where GPM does not give them."""
        m = self.latest.get(index)
        if not m or m.get("pcie_tx_mib_per_s") is None or m.get("pcie_rx_mib_per_s") is None:
            return None
        return rate(m, "pcie_tx_mib_per_s"), rate(m, "pcie_rx_mib_per_s")

    def close(self) -> None:
        """Frees the sample buffers (before nvmlShutdown)."""
        for index, buffers in self._buffers.items():
            for b in buffers:
                self._q(index, "nvmlGpmSampleFree", b)
        self._buffers.clear()


def rate(m: dict[str, float | None], name: str) -> int | None:
    """A GPM rate (MiB/s) in bytes/s; None where GPM does not give it."""
    v = m.get(name)
    return None if v is None else int(max(0.0, v) * _MIB)


def pct(m: dict[str, float | None], name: str) -> float | None:
    v = m.get(name)
    return None if v is None else round(max(0.0, min(100.0, v)), 1)
