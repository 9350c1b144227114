"""Sampling loop glue: merges fast per-GPU samples with PCIe rates from a worker thread."""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Callable

from gpuwatch.monitor.nvml.activity import Activity, IdlePolicy
from gpuwatch.monitor.nvml.backend import Backend
from gpuwatch.monitor.nvml.samples import Snapshot


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC).astimezone()


class Sampler:
    """Takes :class:`Snapshot` s from a backend. PCIe throughput blocks ~20 ms per call in
    NVML, so with ``background_pcie=True`` a daemon thread keeps the latest PCIe rates and
    :meth:`snapshot` merges them without waiting; otherwise it measures PCIe inline (``--once``)."""

    def __init__(
        self,
        backend: Backend,
        interval_s: float = 1.0,
        background_pcie: bool = True,
        now: Callable[[], _dt.datetime] = _now,
        idle: IdlePolicy | None = None,
    ) -> None:
        self.backend = backend
        self.activity = Activity(idle)
        """Energy over time, low SM activity and held-idle GPUs (gpuwatch/monitor/nvml/activity.py)."""
        self.interval_s = interval_s
        self._now = now
        self.gpu_count = backend.device_count()
        self.driver_version = backend.driver_version()
        self._pcie: dict[int, tuple[int | None, int | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background_pcie:
            self._thread = threading.Thread(
                target=self._pcie_loop, name="gpuwatch-pcie", daemon=True
            )
            self._thread.start()

    @property
    def source(self) -> str:
        """What the samples are, for reports: ``"demo"`` (simulated) or ``"NVML"``."""
        return "demo" if self.backend.simulated else "NVML"

    def _pcie_loop(self) -> None:
        while not self._stop.is_set():
            for i in range(self.gpu_count):
                try:
                    rates = self.backend.pcie_throughput(i)
                except Exception:  # a backend bug costs this GPU's PCIe rates, not the thread
                    rates = (None, None)
                with self._lock:
                    self._pcie[i] = rates
            self._stop.wait(self.interval_s)

    def snapshot(self) -> Snapshot:
        gpus = []
        for i in range(self.gpu_count):
            g = self.backend.sample(i)
            if self._thread is None:
                tx, rx = self.backend.pcie_throughput(i)
            else:
                with self._lock:
                    tx, rx = self._pcie.get(i, (None, None))
            gpus.append((g, tx, rx))
        now = self._now()
        apply = self.activity.apply
        return Snapshot(
            time=now,
            driver_version=self.driver_version,
            gpus=tuple(
                apply(g, now, pcie_tx_bytes_per_s=tx, pcie_rx_bytes_per_s=rx) for g, tx, rx in gpus
            ),
            problem=self.backend.driver_problem,
        )

    def close(self) -> None:
        """Stops the PCIe thread and releases the backend, without waiting on an NVML call
        that hangs (the thread is a daemon: it goes with the process)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.25)
        self.backend.close()
