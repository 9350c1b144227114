"""Samples the GPUs while a profiled script runs, for the report's timeline."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import GpuSample
from gpuwatch.monitor.threads import OwnThread

#: At 0.5 s a sample, 24 hours of samples per GPU before the oldest are dropped.
MAX_SAMPLES = 172_800
#: Seconds between two reads of the energy counter alone (cheap: one NVML call per GPU).
#: NB: NVML's counter itself moves in steps (every 20-100 ms on the GPUs we know of): reading
#: faster would not resolve shorter steps; reading at the stats' 0.5 s would blur every step
#: shorter than that into the mean power around it.
ENERGY_INTERVAL_S = 0.02
#: Changes of the counter kept per GPU (the newest): 20 minutes at one change per 20 ms.
MAX_ENERGY_POINTS = 60_000
#: At the end, how long to wait at most for the counter to move past the run's end.
ENERGY_SETTLE_S = 0.5


def sample_row(t: float, g: GpuSample, pids: Collection[int] = ()) -> dict[str, object]:
    """One GPU at ``t`` seconds into the run, as the report's ``gpu_samples`` hold it;
    ``script_sm_util_pct`` is the SM share of the script's own processes (``pids``), where NVML
    reports per-process utilisation (None where it does not)."""
    mine = [p.sm_util_pct for p in g.processes if p.pid in pids and p.sm_util_pct is not None]
    return {
        "t": t,
        "gpu": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "script_sm_util_pct": sum(mine) if mine else None,
        "gpu_util_pct": g.gpu_util_pct,
        "memory_used_bytes": g.memory_used_bytes,
        "memory_total_bytes": g.memory_total_bytes,
        "pcie_tx_bytes_per_s": g.pcie_tx_bytes_per_s,
        "pcie_rx_bytes_per_s": g.pcie_rx_bytes_per_s,
        # NB: GPM's figures (null without GPM): a run "100% utilised" with its SMs mostly empty
        # shows as a gap between these and gpu_util_pct.
        "sm_active_pct": g.sm_active_pct,
        "tensor_active_pct": g.tensor_active_pct,
        "power_avg_w": g.power_avg_w,
        "energy_total_mj": g.energy_total_mj,
    }


class GpuTimeline:
    """A daemon thread taking a snapshot every ``interval_s`` (rows ``{"t", "gpu",
    "gpu_util_pct", "memory_used_bytes", ...}``) and, where the backend reads the energy counter
    alone (``energy_mj``), that counter every ``energy_interval_s``: its changes, on ``clock``,
    for the energy of each step (gpuwatch/analysis/energy.py)."""

    def __init__(
        self,
        sampler: Sampler,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.perf_counter,
        pids: Collection[int] | None = None,
        energy_interval_s: float = ENERGY_INTERVAL_S,
    ) -> None:
        self.sampler = sampler
        self.pids = {os.getpid()} if pids is None else set(pids)
        self.interval_s = interval_s
        self.energy_interval_s = energy_interval_s
        self._clock = clock
        self._t0 = clock()
        self._samples: deque[dict[str, object]] = deque(maxlen=MAX_SAMPLES)
        self._energy: dict[int, deque[tuple[float, int]]] = {}
        self._energy_mj: Callable[[int], int | None] | None = getattr(
            sampler.backend, "energy_mj", None
        )
        self._gpus = 0
        self.mig_gpus: dict[str, int] = {}
        """The GPU each MIG instance of ``CUDA_VISIBLE_DEVICES`` is part of (learned at start)."""
        self._stop = threading.Event()
        self._thread = OwnThread(target=self._loop, name="gpuwatch-timeline", daemon=True)

    def start(self) -> GpuTimeline:
        self.mig_gpus = learn_mig_gpus(self.sampler.backend)
        self._t0 = self._clock()
        self._thread.start()
        return self

    def _loop(self) -> None:
        next_snapshot = self._clock()
        while not self._stop.is_set():
            try:
                if self._clock() >= next_snapshot:
                    snap = self.sampler.snapshot()
                    now = self._clock()
                    next_snapshot = now + self.interval_s
                    self._gpus = len(snap.gpus)
                    self._samples.extend(
                        sample_row(round(now - self._t0, 3), g, self.pids) for g in snap.gpus
                    )
                    if self._energy_mj is None:  # a backend without a cheap read: the rows'
                        for g in snap.gpus:
                            self.note_energy(g.index, now, g.energy_total_mj)
                self.read_energy()
            except Exception:  # a failing driver must not take the profiled script down
                return
            wait = self.interval_s if self._energy_mj is None else self.energy_interval_s
            self._stop.wait(max(0.0, min(wait, next_snapshot - self._clock())))

    def note_energy(self, gpu: int, t: float, mj: int | None) -> None:
        """Keeps ``(t, mj)`` when the counter moved (or was first read): its changes only, so
        that the power between two is spread over the time the counter took to move."""
        if mj is None:
            return
        points = self._energy.get(gpu)
        if points is None:
            points = self._energy[gpu] = deque(maxlen=MAX_ENERGY_POINTS)
        if not points or points[-1][1] != mj:
            points.append((t, mj))

    def read_energy(self) -> None:
        """Reads every GPU's energy counter once (where the backend reads it alone)."""
        if self._energy_mj is None:
            return
        try:
            if not self._gpus:
                self._gpus = self.sampler.backend.device_count()
            for gpu in range(self._gpus):
                mj = self._energy_mj(gpu)
                self.note_energy(gpu, self._clock(), mj)
        except Exception:  # a driver that fails here: the stats go on, the energy stops
            self._energy_mj = None

    def _settle_energy(self) -> None:
        """After the run: reads on until each moving counter has moved once more (the last
        step's end then lies before a change), at most two of its update gaps or
        ENERGY_SETTLE_S (a bounded number of reads, whatever the clock)."""
        if self._energy_mj is None:
            return
        moving = {g: p for g, p in self._energy.items() if len(p) >= 2}
        if not moving:
            return
        gap_s = max((p[-1][0] - p[0][0]) / (len(p) - 1) for p in moving.values())
        asked, poll_s = self._clock(), min(self.energy_interval_s, ENERGY_INTERVAL_S)
        for _ in range(int(min(ENERGY_SETTLE_S, 2 * gap_s) / poll_s) + 1):
            if all(p[-1][0] >= asked for p in moving.values()):
                return
            time.sleep(poll_s)  # NB: a bounded poll of the driver's counter
            self.read_energy()

    def stop(self) -> TimelineSamples:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3)
        try:
            self._settle_energy()
        except Exception:  # the report goes out without the last step's energy
            pass
        self.sampler.close()
        energy = {gpu: [(t - self._t0, mj) for t, mj in p] for gpu, p in self._energy.items()}
        # how often the counter was read: the stats' interval without a cheap read
        read_s = self.interval_s if self._energy_mj is None else self.energy_interval_s
        return TimelineSamples(
            list(self._samples), dict(self.mig_gpus), energy, self._t0, round(read_s * 1000, 3)
        )


class TimelineSamples(NamedTuple):
    """What a :class:`GpuTimeline` took: its rows, which GPU each MIG instance of
    ``CUDA_VISIBLE_DEVICES`` is part of (for :func:`samples_of_used_gpus`), and each GPU's
    energy counter changes ``(s since t0, mJ)`` (none for a GPU without the counter)."""

    rows: list[dict[str, object]]
    mig_gpus: dict[str, int]
    energy: dict[int, list[tuple[float, int]]] = {}
    t0: float = 0.0
    """When the timeline started, on its clock (``time.perf_counter`` unless injected)."""
    energy_read_ms: float = 0.0


def learn_mig_gpus(backend: object) -> dict[str, int]:
    """Asks ``backend`` (NVML) which GPU each MIG instance in ``CUDA_VISIBLE_DEVICES`` is part
    of, so that the samples of the right GPU can be kept after the run: ``{"MIG-<uuid>": gpu}``
    for the caller to keep and pass to :func:`used_gpu_indices`."""
    found: dict[str, int] = {}
    gpu_of_mig = getattr(backend, "gpu_of_mig", None)
    if gpu_of_mig is None:
        return found
    for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(","):
        part = part.strip()
        if part.startswith("MIG-") and not part.startswith("MIG-GPU-"):
            gpu = gpu_of_mig(part)
            if gpu is not None:
                found[part] = gpu
    return found


def used_gpu_indices(
    devices: Sequence[Mapping[str, object]],
    samples: Sequence[Mapping[str, object]] = (),
    mig_gpus: Mapping[str, int] | None = None,
) -> set[int] | None:
    """NVML indices of the CUDA devices the script used (``CUDA_VISIBLE_DEVICES`` respected):
    an empty set when it used none, None when they cannot be told apart.

    ``samples`` (rows of :func:`sample_row`) map GPU UUIDs in ``CUDA_VISIBLE_DEVICES`` to NVML
    indices; a MIG instance counts as the GPU it is part of (``MIG-GPU-<uuid>/..`` says it,
    ``MIG-<uuid>`` as ``mig_gpus``, from :func:`learn_mig_gpus`, says)."""
    from gpuwatch.monitor.nvml.chosen import resolve_visible

    names = [d["device"] for d in devices]
    cuda = [int(n.split(":")[1]) for n in names if isinstance(n, str) and n.startswith("cuda:")]
    if not cuda:
        return set()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return set(cuda)
    uuids = {g: str(s.get("uuid") or "") for s in samples if isinstance(g := s["gpu"], int)}
    resolved = resolve_visible(visible, uuids, (mig_gpus or {}).get)
    used = {resolved[i] if i < len(resolved) else None for i in cuda}
    return None if None in used else {i for i in used if i is not None}


def samples_of_used_gpus(
    devices: Sequence[Mapping[str, object]],
    samples: Sequence[dict[str, object]],
    mig_gpus: Mapping[str, int] | None = None,
) -> tuple[list[dict[str, object]], str | None]:
    """The samples of the GPUs the script used (``devices``: the report's), none when it used
    none (the node's load is someone else's), and all of them when they cannot be told apart,
    with the scope that says so (else None; ``mig_gpus``: see :func:`used_gpu_indices`)."""
    used = used_gpu_indices(devices, samples, mig_gpus)
    if used is None:
        return list(samples), "all GPUs (which ones the script used is unknown)"
    return [s for s in samples if s["gpu"] in used], None
