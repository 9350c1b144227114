"""The NVML layer: typed samples, the real backend, the fake backend, the sampler."""

from __future__ import annotations

from gpuwatch.monitor.nvml.backend import Backend, NvmlUnavailable
from gpuwatch.monitor.nvml.fake import FakeBackend
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import SNAPSHOT_SCHEMA, GpuSample, ProcessSample, Snapshot

__all__ = [
    "SNAPSHOT_SCHEMA",
    "Backend",
    "FakeBackend",
    "GpuSample",
    "NvmlUnavailable",
    "ProcessSample",
    "Sampler",
    "Snapshot",
    "open_backend",
]


def open_backend(demo: bool = False, demo_gpus: int = 2) -> Backend:
    """The fake backend for ``--demo``, else the real NVML one (raises NvmlUnavailable)."""
    if demo:
        return FakeBackend(gpu_count=demo_gpus)
    from gpuwatch.monitor.nvml._real import RealBackend

    return RealBackend()
