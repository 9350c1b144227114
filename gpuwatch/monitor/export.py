"""``gpuwatch export``: the GPUs' stats for Prometheus, named as dcgm-exporter names them.

A sampling thread takes a snapshot every ``--interval`` seconds; a scrape only reads the latest
one (it never waits on NVML). Metrics are built with ``prometheus_client``'s metric families in a
registry of their own (no exposition format written by hand). Values NVML does not report are
left out, never sent as 0. What a process says about itself is kept to what a dashboard needs: its
short name, never its arguments; its user only with ``--process-users``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwatch.monitor.nvml.samples import GpuSample, JobInfo, ProcessSample, Snapshot

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric as Family

MIB = 1024 * 1024
#: How long one scrape's connection may take, accept to last byte (TLS handshake, request,
#: answer): Prometheus' own scrape timeout is 10 s by default.
CONNECTION_DEADLINE_S = 10.0
#: The longest one read or write of a connection may wait (``--client-idle-timeout``): a
#: scraper sends its request as soon as it connects and reads the answer as it comes.
IDLE_TIMEOUT_S = 3.0
#: The shortest staleness limit (see gpuwatch/cli/export.py's ``stale_s``).
STALE_FLOOR_S = 2.0


@dataclass(frozen=True)
class Metric:
    """One dcgm-exporter gauge: its name, help text and the value of a GPU sample (None: left
    out)."""

    name: str
    help: str
    value: Callable[[GpuSample], float | None]


def _div(x: float | None, by: float) -> float | None:
    return None if x is None else x / by


def _sum(*xs: float | None) -> float | None:
    return None if any(x is None for x in xs) else float(sum(x for x in xs if x is not None))


def _gpm(g: GpuSample, value: float | None) -> float | None:
    """A rate only GPM measures as DCGM's profiling fields do (NVML's own PCIe figure is not)."""
    return value if g.gpm else None


#: dcgm-exporter's names (etc/default-counters.csv) and units; README says which match exactly.
GPU_METRICS = (
    Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.gpu_util_pct),
    Metric("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    Metric(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda g: _div(g.memory_used_bytes, MIB),
    ),
    Metric(
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: _div(
            None
            if g.memory_total_bytes is None or g.memory_used_bytes is None
            else g.memory_total_bytes - g.memory_used_bytes,
            MIB,
        ),
    ),
    Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    Metric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    Metric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    Metric("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz),
    Metric("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda g: g.encoder_util_pct),
    Metric("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda g: g.decoder_util_pct),
    Metric(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe TX throughput (in KB/s) via NVML.",
        lambda g: _div(g.pcie_tx_bytes_per_s, 1024),
    ),
    Metric(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe RX throughput (in KB/s) via NVML.",
        lambda g: _div(g.pcie_rx_bytes_per_s, 1024),
    ),
    Metric(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "NVLink bandwidth of all links, TX and RX (in KB/s).",
        lambda g: _div(_sum(g.nvlink_tx_bytes_per_s, g.nvlink_rx_bytes_per_s), 1024),
    ),
    Metric(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (NVML's bitmask).",
        lambda g: g.throttle_reasons,
    ),
    Metric(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        lambda g: g.energy_total_mj,
    ),
    # NB: DCGM's profiling fields are ratios 0-1 (their help says "in %"; the values are not).
    Metric(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned (ratio 0-1), via NVML GPM.",
        lambda g: _div(g.sm_active_pct, 100),
    ),
    Metric(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM (ratio 0-1), via NVML GPM.",
        lambda g: _div(g.sm_occupancy_pct, 100),
    ),
    Metric(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active (ratio 0-1), via NVML GPM.",
        lambda g: _div(g.tensor_active_pct, 100),
    ),
    Metric(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data "
        "(ratio 0-1), via NVML GPM.",
        lambda g: _div(g.dram_active_pct, 100),
    ),
    Metric(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus (in bytes/s), via NVML GPM.",
        lambda g: _gpm(g, g.pcie_tx_bytes_per_s),
    ),
    Metric(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus (in bytes/s), via NVML GPM.",
        lambda g: _gpm(g, g.pcie_rx_bytes_per_s),
    ),
    Metric(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, all links (in bytes/s).",
        lambda g: g.nvlink_tx_bytes_per_s,
    ),
    Metric(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, all links (in bytes/s).",
        lambda g: g.nvlink_rx_bytes_per_s,
    ),
    Metric(
        "gpuwatch_gpu_held_idle",
        "1 while processes hold this GPU's memory and it has been idle for --idle-after "
        "seconds (SM activity, or utilisation without GPM, under --idle-below).",
        lambda g: None if g.lost else float(g.held_idle),
    ),
    Metric(
        "gpuwatch_gpu_held_idle_seconds",
        "How long processes have held this GPU while it is idle (in s); absent when it is not.",
        lambda g: g.held_idle_s,
    ),
    Metric(
        "gpuwatch_gpu_low_sm_activity",
        "1 while utilisation is high but SM activity low (one small kernel at a time, or a "
        "collective waiting on a peer); absent without GPM.",
        lambda g: None if g.sm_active_pct is None else float(g.low_sm_activity),
    ),
)

#: ``--process-jobs``: dcgm-exporter's names for a process's job (its Kubernetes mapping and
#: HPC job mapping), each from the process's own /proc.
JOB_LABELS = ("pod", "namespace", "container", "hpc_job")


def job_labels(job: JobInfo | None) -> list[str]:
    if job is None:
        return ["", "", "", ""]
    return [job.pod or "", job.namespace or "", job.container or "", job.slurm_job_id or ""]


class GpuCollector:
    """Yields the latest snapshot's metrics on every scrape (``registry.register(self)``)."""

    def __init__(
        self,
        hostname: str,
        processes: bool = True,
        users: bool = False,
        stale_after_s: float | None = None,
        jobs: bool = False,
    ) -> None:
        self.hostname = hostname
        self.processes = processes
        self.users = users
        self.jobs = jobs
        self.stale_after_s = stale_after_s
        """Withdraw the GPU series once the latest sample is older than this (None: never)."""
        self._snapshot: Snapshot | None = None
        self._taken: float | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest sample; setting it stamps the time it was taken."""
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snap: Snapshot | None) -> None:
        self._snapshot, self._taken = snap, time.monotonic()

    def sample_age_s(self) -> float | None:
        """Seconds since the latest sample (None: none yet)."""
        return None if self._taken is None else time.monotonic() - self._taken

    @property
    def stale(self) -> bool:
        age = self.sample_age_s()
        return self.stale_after_s is not None and age is not None and age > self.stale_after_s

    def describe(self) -> list[Family]:
        return []  # families are built per scrape; nothing to check at registration

    def collect(self) -> Iterator[Family]:
        from prometheus_client.core import GaugeMetricFamily

        snap = self.snapshot
        age = GaugeMetricFamily(
            "gpuwatch_sample_age_seconds",
            "Seconds since the GPUs were last sampled; every GPU and process series is withdrawn "
            "while this is over the staleness limit (NVML not answering).",
            labels=["Hostname"],
        )
        age_s = self.sample_age_s()
        if age_s is not None and snap is not None:
            age.add_metric([self.hostname], round(age_s, 3))
        yield age
        # NB: stale figures are withdrawn, not served: a dashboard then shows a gap (and an
        # alert on absent() fires) instead of a GPU frozen at its last value.
        if snap is None or self.stale:
            return
        labels = ["gpu", "UUID", "device", "modelName", "pci_bus_id", "Hostname"]
        gpus = [g for g in snap.gpus if not g.lost]
        for m in GPU_METRICS:
            fam = GaugeMetricFamily(m.name, m.help, labels=labels)
            for g in gpus:
                value = m.value(g)
                if value is not None:
                    fam.add_metric(self._gpu_labels(g), float(value))
            yield fam
        if not self.processes:
            return
        plabels = ["gpu", "UUID", "pid", "command", "Hostname"] + (["user"] if self.users else [])
        plabels += list(JOB_LABELS) if self.jobs else []
        mem = GaugeMetricFamily(
            "gpuwatch_process_gpu_memory_bytes",
            "GPU memory a process uses on a GPU (in bytes).",
            labels=plabels,
        )
        sm = GaugeMetricFamily(
            "gpuwatch_process_sm_util_percent",
            "A process's share of a GPU's SM time over the last sample (in %).",
            labels=plabels,
        )
        for g in gpus:
            for p in g.processes:
                values = self._process_labels(g, p)
                if p.gpu_memory_bytes is not None:
                    mem.add_metric(values, float(p.gpu_memory_bytes))
                if p.sm_util_pct is not None:
                    sm.add_metric(values, float(p.sm_util_pct))
        yield mem
        yield sm

    def _process_labels(self, g: GpuSample, p: ProcessSample) -> list[str]:
        values = [str(g.index), g.uuid or "", str(p.pid), _short(p.name), self.hostname]
        if self.users:
            values.append(p.user or "")
        if self.jobs:
            values += [v[:128] for v in job_labels(p.job)]
        return values

    def _gpu_labels(self, g: GpuSample) -> list[str]:
        return [
            str(g.index),
            g.uuid or "",
            f"nvidia{g.index}",
            g.name or "",
            g.pci_bus_id or "",
            self.hostname,
        ]


def _short(name: str | None) -> str:
    """A process's short name, bounded: never its arguments.
    NB: psutil's ``name()`` is argv[0] when the executable's name is 15 characters or more and
    argv[0] starts with it, and argv[0] can carry anything (``exec -a "worker --api-token=S"``):
    only what comes before the first whitespace is kept, then its last path component."""
    first = (name or "").split(maxsplit=1)[0] if (name or "").strip() else ""
    return (os.path.basename(first) or "?")[:64]
