"""The one place a built report is finished: :func:`finish` adds what was measured beside the
profile (the GPU samples of the GPUs the script used, and their energy per step) and returns
the report every output is rendered from. Nothing changes a report after it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from profilers.report import Report
from profilers.sections import TimeView

ENERGY_SCOPE_UNKNOWN = "all GPUs (which ones the script used is unknown)"


@dataclass(frozen=True)
class GpuMeasures:
    """What the GPU statistics took while the script ran (NVML, or the demo's GPUs)."""

    source: str
    """Where they came from (``"NVML"``, ``"demo"``), or why there are none; the report's
    ``options.gpu_stats``."""
    rows: Sequence[dict[str, object]] = ()
    """GPU sample rows (``{"t", "gpu", ...}``), every GPU of the node."""
    mig_gpus: Mapping[str, int] = field(default_factory=dict)
    """Which GPU each MIG instance of ``CUDA_VISIBLE_DEVICES`` is part of."""
    energy_ms: Mapping[int, Sequence[tuple[float, int]]] | None = None
    """Each GPU's energy counter changes ``(ms on the profile's clock, mJ)``; None: the counter
    was not followed (a simulated GPU, or no time view to join it to)."""
    energy_read_ms: float = 0.0
    """How often the counter was read, ms."""


def finish(report: Report, measures: GpuMeasures | None) -> Report:
    """``report`` with the GPU samples of the GPUs the script used (all, and said so, when
    which ones cannot be told) and the energy of each step and of the run on them. ``None``:
    no GPU statistics were taken (``options.gpu_stats`` stays as the report has it)."""
    if measures is None:
        return report
    from gpuwatch.monitor.gpu_timeline import samples_of_used_gpus, used_gpu_indices

    samples, scope = samples_of_used_gpus(report.devices, measures.rows, measures.mig_gpus)
    options = report.options.replace(gpu_stats=measures.source)
    if scope is not None:
        options = options.replace(gpu_samples_scope=scope)
    time = report.time
    if time is not None and measures.energy_ms is not None and not report.options.fake_cuda:
        used = used_gpu_indices(report.devices, measures.rows, measures.mig_gpus)
        energy_scope = None
        if used is None:
            used, energy_scope = set(measures.energy_ms), ENERGY_SCOPE_UNKNOWN
        if used:  # NB: a script that used no GPU: the node's energy is not its own
            from gpuwatch.analysis.energy import with_energy

            time = TimeView.from_dict(
                with_energy(time, measures.energy_ms, used, measures.energy_read_ms, energy_scope)
            )
    return report.replace(gpu_samples=samples, options=options, time=time)
