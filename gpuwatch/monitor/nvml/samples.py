"""Typed, immutable samples of GPU and process state.

Every numeric field carries its unit in its name and is ``None`` when the device (or the driver)
does not report it; nothing here ever holds an ``'N/A'`` string.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field

SNAPSHOT_SCHEMA = "gpuwatch.snapshot/1"


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Which job a process belongs to, from its environment and cgroup (``/proc/PID``); a field
    is None where the process does not say (no such variable, not in a container)."""

    slurm_job_id: str | None = None
    """``SLURM_JOB_ID`` (an array task's ``SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID``)."""
    slurm_user: str | None = None
    """``SLURM_JOB_USER``: who submitted the job."""
    rank: int | None = None
    """``RANK`` of a torchrun (or other launcher's) worker."""
    container: str | None = None
    """The container's id (12 hex digits, as ``docker ps`` shows it), from the cgroup path."""
    pod: str | None = None
    """Kubernetes pod name (the container's ``HOSTNAME``, which kubelet sets to it)."""
    pod_uid: str | None = None
    """Kubernetes pod UID, from the cgroup path."""
    namespace: str | None = None
    """Kubernetes namespace (``POD_NAMESPACE`` or the service-account namespace file)."""

    @property
    def label(self) -> str:
        """``slurm 1234 r0``, ``ns/pod``, ``ctr 0123456789ab``: short, for the process table."""
        parts = []
        if self.slurm_job_id is not None:
            parts.append(f"slurm {self.slurm_job_id}")
        if self.pod is not None or self.pod_uid is not None:
            pod = self.pod or (self.pod_uid or "")[:8]
            parts.append(f"{self.namespace}/{pod}" if self.namespace else f"pod {pod}")
        elif self.container is not None:
            parts.append(f"ctr {self.container}")
        if self.rank is not None:
            parts.append(f"r{self.rank}")
        return " ".join(parts)

    def words(self) -> tuple[str, ...]:
        """What ``/job:TEXT`` matches against."""
        return tuple(
            v
            for v in (
                self.slurm_job_id,
                self.slurm_user,
                self.container,
                self.pod,
                self.pod_uid,
                self.namespace,
                None if self.rank is None else f"r{self.rank}",
            )
            if v is not None
        )


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process using a GPU, as NVML and psutil see it."""

    pid: int
    gpu_index: int
    name: str | None
    """Short process name (``psutil.Process.name()``)."""
    command: str | None
    """Full command line, space-joined."""
    user: str | None
    type: str
    """``"compute"``, ``"graphics"`` or ``"compute+graphics"`` (``nvidia-smi``'s C, G, C+G)."""
    gpu_memory_bytes: int | None
    sm_util_pct: int | None
    """Share of SM time this process used over the last sample period."""
    cpu_pct: float | None
    """Host CPU use of the process (100 = one full core)."""
    host_memory_bytes: int | None
    """Resident set size on the host."""
    start_time: float | None = None
    """When the process started (seconds since the epoch, psutil's ``create_time``): with the
    pid, what tells this process from a later one that reuses its pid."""
    job: JobInfo | None = None
    """Its job (SLURM, container, pod, rank); None where ``/proc/PID`` could not be read
    (another user's process, another PID namespace) or the source does not say."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment (``nvidia-smi --query-gpu=...`` names in the docstrings)."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    gpu_util_pct: int | None = None
    """``utilization.gpu``: share of time a kernel was running."""
    mem_util_pct: int | None = None
    """``utilization.memory``: share of time device memory was read or written."""
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pstate: int | None = None
    """Performance state, 0 (fastest) to 15; ``P0`` in nvidia-smi."""
    throttle_reasons: int | None = None
    """NVML's clock throttle (event) reasons, a bitmask: why the clocks are below their maximum
    (power cap 0x4, HW slowdown 0x8, thermal 0x20/0x40, ...); None where NVML does not say."""
    pcie_tx_bytes_per_s: int | None = None
    pcie_rx_bytes_per_s: int | None = None
    nvlink_tx_bytes_per_s: int | None = None
    nvlink_rx_bytes_per_s: int | None = None
    encoder_util_pct: int | None = None
    decoder_util_pct: int | None = None
    sm_active_pct: float | None = None
    """GPM (Hopper and later): share of SM time with at least one warp resident, averaged over
    all SMs (``DCGM_FI_PROF_SM_ACTIVE``). Unlike ``gpu_util_pct``, one small kernel at a time
    reads low."""
    sm_occupancy_pct: float | None = None
    """GPM: resident warps over the most the SMs can hold (``DCGM_FI_PROF_SM_OCCUPANCY``)."""
    tensor_active_pct: float | None = None
    """GPM: share of time the tensor cores were busy (``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``)."""
    dram_active_pct: float | None = None
    """GPM: DRAM bandwidth used over its peak (``DCGM_FI_PROF_DRAM_ACTIVE``)."""
    gpm: bool | None = None
    """Whether this GPU has GPM (the figures above); None where the source does not say."""
    energy_total_mj: int | None = None
    """NVML's total-energy counter: millijoules since the driver was loaded."""
    energy_since_start_j: float | None = None
    """Joules used since gpuwatch began watching this GPU."""
    power_avg_w: float | None = None
    """Mean power since the previous sample, from the energy counter (``power_w`` is NVML's
    instantaneous reading)."""
    low_sm_activity: bool = False
    """Utilisation high but SM activity low: "busy" with one small kernel at a time, or stuck
    (a collective waiting on a peer). See :mod:`gpuwatch.monitor.nvml.activity`."""
    held_idle_s: float | None = None
    """Seconds this GPU has had processes holding memory while doing nothing; None when it is
    not held idle now."""
    held_idle: bool = False
    """Held idle for at least the set time (``--idle-after``): HELD IDLE."""
    lost: bool = False
    """True once NVML reported the GPU lost (fallen off the bus) or in an unknown state."""
    processes: tuple[ProcessSample, ...] = ()
    problem: str | None = None
    """Why some of this GPU's figures are missing, for the user (``"no permission to list
    processes"``, ``"NVML cannot open this GPU: ..."``); None when nothing is."""

    @property
    def memory_used_pct(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["processes"] = [p.to_dict() for p in self.processes]
        return d


@dataclass(frozen=True, slots=True)
class Snapshot:
    """All GPUs at one moment."""

    time: _dt.datetime
    driver_version: str | None
    gpus: tuple[GpuSample, ...] = field(default_factory=tuple)
    problem: str | None = None
    """A problem of the whole driver (``"... reboot or reload the driver"``), else None."""

    def to_dict(self) -> dict[str, object]:
        """The ``gpuwatch.snapshot/1`` document (``gpuwatch top --json``; gpuwatch/schemas/snapshot-1.schema.json)."""
        return {
            "schema": SNAPSHOT_SCHEMA,
            "time": self.time.isoformat(),
            "driver_version": self.driver_version,
            "problem": self.problem,
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @property
    def processes(self) -> list[ProcessSample]:
        return [p for g in self.gpus for p in g.processes]


#: NVML's clock throttle (event) reason bits, as a user reads them. Idle (0x1) and application
#: clock settings (0x2) are left out: they are not the GPU being held back under load.
THROTTLE_REASONS = (
    (0x4, "power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal"),
    (0x40, "HW thermal"),
    (0x80, "power brake"),
)


def throttle_names(mask: int | None) -> list[str]:
    """Why the clocks are held down, in words (empty when nothing is holding them)."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS if mask & bit]
