"""Deterministic simulated GPUs for tests and ``gpuwatch top --demo``.

Values are smooth functions of the time since the backend was made (with an injectable clock),
so a test that fixes the clock knows every number the app will show.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpuwatch.monitor.nvml.samples import GpuSample, JobInfo, ProcessSample

_GIB = 1024**3
_MIB = 1024**2


@dataclass
class _FakeProcess:
    pid: int
    gpu_index: int
    user: str
    command: str
    type: str
    base_memory_bytes: int
    job: JobInfo


_COMMANDS = (
    ("alice", "python train.py --config resnet50.yaml", "compute"),
    ("bob", "python -m torch.distributed.run --nproc-per-node 2 finetune.py", "compute"),
    ("carol", "jupyter-lab --no-browser", "compute"),
    ("root", "/usr/lib/xorg/Xorg :0", "graphics"),
)


def _job(user: str, gpu: int) -> JobInfo:
    """alice runs a SLURM job, bob a torchrun job under SLURM (a rank per GPU), carol a
    notebook in a Kubernetes pod; Xorg belongs to no job."""
    if user == "alice":
        return JobInfo(slurm_job_id="4242", slurm_user="alice", rank=0)
    if user == "bob":
        return JobInfo(slurm_job_id="4317", slurm_user="bob", rank=gpu)
    if user == "carol":
        return JobInfo(
            container="3f2a9c1d0b7e",
            pod="carol-notebook-0",
            pod_uid="5b1c7c9e-2f3d-4d1e-9a7b-0c6d8e2f1a34",
            namespace="research",
        )
    return JobInfo()


class FakeBackend:
    """Simulated GPUs with values that move over time (at most 4 processes per GPU).
    ``idle_gpus``: held idle (memory held, nothing runs); ``stuck_gpus``: "100% utilised" with
    their SMs almost empty (a collective waiting on a peer); ``gpm=False``: older than Hopper."""

    label = "demo"
    simulated = True

    def __init__(
        self,
        gpu_count: int = 2,
        clock: Callable[[], float] = time.monotonic,
        processes_per_gpu: int = 2,
        idle_gpus: Collection[int] = (),
        stuck_gpus: Collection[int] = (),
        gpm: bool = True,
    ) -> None:
        self._clock = clock
        self.idle_gpus = set(idle_gpus)
        self.stuck_gpus = set(stuck_gpus)
        self.gpm = gpm
        self._t0 = clock()
        self._count = gpu_count
        self.signals: list[tuple[int, int]] = []
        """Every ``(pid, signum)`` sent, for tests."""
        self.start_times: dict[int, float] = {}
        self._procs: dict[int, _FakeProcess] = {}
        for i in range(gpu_count):
            for j in range(min(processes_per_gpu, len(_COMMANDS))):
                user, cmd, kind = _COMMANDS[(i + j) % len(_COMMANDS)]
                pid = 4100 + 10 * i + j
                self._procs[pid] = _FakeProcess(
                    pid, i, user, cmd, kind, (2 + 3 * j + i) * _GIB, _job(user, i)
                )

    def _t(self) -> float:
        return self._clock() - self._t0

    def driver_version(self) -> str | None:
        return "560.35.03 (demo)"

    def device_count(self) -> int:
        return self._count

    def energy_mj(self, index: int) -> int | None:
        """The energy counter alone (as the real backend's): a steady 350 W, see :meth:`sample`."""
        return int((1_000_000 + self._t()) * 350_000)

    def sample(self, index: int) -> GpuSample:
        t = self._t()
        phase = 1.3 * index
        util = _wave(t / 6.0 + phase, 55, 40)
        sm_active = util * 0.8
        if index in self.idle_gpus:
            util, sm_active = 0, 0.0
        elif index in self.stuck_gpus:
            util, sm_active = 100, 12.0
        procs = tuple(self._process_samples(index, t))
        total = 80 * _GIB
        used = min(total, sum(p.gpu_memory_bytes or 0 for p in procs) + 600 * _MIB)
        power_limit = 700.0
        gpm = self.gpm
        return GpuSample(
            index=index,
            name="NVIDIA H100 80GB HBM3 (demo)",
            uuid=f"GPU-demo{index:04d}-0000-0000-0000-000000000000",
            pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
            gpu_util_pct=util,
            mem_util_pct=_wave(t / 6.0 + phase + 0.5, 35, 30),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperature_c=_wave(t / 40.0 + phase, 58, 14),
            power_w=round(90.0 + (power_limit - 150.0) * util / 100.0, 1),
            power_limit_w=power_limit,
            fan_pct=None,  # H100 SXM boards report no fan, like the real thing
            sm_clock_mhz=1980 if util > 5 else 345,
            mem_clock_mhz=2619,
            pstate=0 if util > 5 else 8,
            # idle: clocks down by the driver (0x1); busy near the power limit: the cap (0x4)
            throttle_reasons=0x4 if util > 90 else (0x1 if util <= 5 else 0),
            pcie_tx_bytes_per_s=None,
            pcie_rx_bytes_per_s=None,
            nvlink_tx_bytes_per_s=_wave(t / 3.0 + phase, 40, 38) * 2 * _GIB // 10,
            nvlink_rx_bytes_per_s=_wave(t / 3.0 + phase + 1, 40, 38) * 2 * _GIB // 10,
            encoder_util_pct=0,
            decoder_util_pct=0,
            sm_active_pct=round(sm_active, 1) if gpm else None,
            sm_occupancy_pct=round(sm_active * 0.45, 1) if gpm else None,
            tensor_active_pct=round(sm_active * 0.6, 1) if gpm else None,
            dram_active_pct=float(_wave(t / 6.0 + phase + 0.5, 35, 30)) if gpm else None,
            gpm=gpm,
            # NB: as if the GPU drew a steady 350 W since the driver loaded 10^6 s ago: exact
            # under a fixed clock, so tests know the joules and the mean power.
            energy_total_mj=int((1_000_000 + t) * 350_000),
            processes=procs,
        )

    def _process_samples(self, index: int, t: float) -> list[ProcessSample]:
        out = []
        for k, p in enumerate(v for v in self._procs.values() if v.gpu_index == index):
            sm = _wave(t / 5.0 + index + k, 45, 40) if p.type == "compute" else 1
            if index in self.idle_gpus:
                sm = 0
            out.append(
                ProcessSample(
                    pid=p.pid,
                    gpu_index=index,
                    name=p.command.split()[0].rsplit("/", 1)[-1],
                    command=p.command,
                    user=p.user,
                    type=p.type,
                    gpu_memory_bytes=p.base_memory_bytes + _wave(t / 9.0 + k, 512, 500) * _MIB,
                    sm_util_pct=sm,
                    cpu_pct=float(_wave(t / 4.0 + k, 60, 40)),
                    host_memory_bytes=(3 + k) * _GIB,
                    start_time=self.start_time(p.pid),
                    job=p.job,
                )
            )
        return out

    def pcie_throughput(self, index: int) -> tuple[int | None, int | None]:
        t = self._t()
        tx = _wave(t / 2.0 + index, 30, 29) * 100 * _MIB // 10
        rx = _wave(t / 2.5 + index + 2, 60, 58) * 200 * _MIB // 10
        return tx, rx

    def send_signal(self, pid: int, signum: int, start_time: float | None = None) -> None:
        """Record the signal; SIGTERM, SIGKILL and SIGINT end the simulated process."""
        if pid not in self._procs:
            raise ProcessLookupError(pid)
        if start_time is not None and start_time != self.start_time(pid):
            raise ProcessLookupError(pid)  # the pid now names another process
        self.signals.append((pid, signum))
        if signum in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
            del self._procs[pid]

    driver_problem: str | None = None
    """The simulation's driver has no problems."""

    def start_time(self, pid: int) -> float:
        """When simulated process ``pid`` started; tests change it to model a reused pid."""
        return self.start_times.get(pid, float(1_700_000_000 + pid))

    def close(self) -> None:
        """Nothing to release: the simulation holds no handles."""


def _wave(x: float, mid: float, amplitude: float) -> int:
    """An integer wave: mid +- amplitude, with a second harmonic so it looks less regular."""
    return int(round(mid + amplitude * (0.8 * math.sin(x) + 0.2 * math.sin(3.1 * x))))
