"""Samples the GPUs while a profiled script runs, for the report's timeline."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpuwatch.nvml.sampler import Sampler
from gpuwatch.nvml.samples import GpuSample

#: At 0.5 s a sample, 24 hours of samples per GPU before the oldest are dropped.
MAX_SAMPLES = 172_800


def sample_row(t: float, g: GpuSample) -> dict[str, Any]:
    """One GPU at ``t`` seconds into the run, as the report's ``gpu_samples`` hold it."""
    return {
        "t": t,
        "gpu": g.index,
        "name": g.name,
        "gpu_util_pct": g.gpu_util_pct,
        "memory_used_bytes": g.memory_used_bytes,
        "memory_total_bytes": g.memory_total_bytes,
        "pcie_tx_bytes_per_s": g.pcie_tx_bytes_per_s,
        "pcie_rx_bytes_per_s": g.pcie_rx_bytes_per_s,
    }


class GpuTimeline:
    """A daemon thread taking a snapshot every ``interval_s``; :meth:`samples` returns plain dicts
    ``{"t", "gpu", "gpu_util_pct", "memory_used_bytes", "pcie_tx_bytes_per_s", ...}``."""

    def __init__(
        self,
        sampler: Sampler,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.sampler = sampler
        self.interval_s = interval_s
        self._clock = clock
        self._t0 = clock()
        self._samples: deque[dict[str, Any]] = deque(maxlen=MAX_SAMPLES)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuwatch-timeline", daemon=True)

    def start(self) -> GpuTimeline:
        self._t0 = self._clock()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                snap = self.sampler.snapshot()
            except Exception:  # a failing driver must not take the profiled script down
                return
            t = round(self._clock() - self._t0, 3)
            self._samples.extend(sample_row(t, g) for g in snap.gpus)
            self._stop.wait(self.interval_s)

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3)
        self.sampler.close()
        return list(self._samples)


def used_gpu_indices(devices: list[dict[str, Any]]) -> set[int] | None:
    """NVML indices of the CUDA devices the script used (CUDA_VISIBLE_DEVICES respected)."""
    cuda = [int(d["device"].split(":")[1]) for d in devices if d["device"].startswith("cuda:")]
    if not cuda:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        parts = [v.strip() for v in visible.split(",")]
        if all(v.isdigit() for v in parts):
            return {int(parts[i]) for i in cuda if i < len(parts)}
        return None  # UUIDs or MIG names: keep every GPU
    return set(cuda)
