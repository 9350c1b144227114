"""The interface every GPU backend offers (the real NVML one and the fake one)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpuwatch.monitor.nvml.samples import GpuSample


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here. The message is one line, fit to show a user as it is."""


@runtime_checkable
class Backend(Protocol):
    """A source of GPU samples.
    ``sample`` must be cheap (a few ms); ``pcie_throughput`` may block for tens of milliseconds
    per call (NVML samples the PCIe counters over a 20 ms window) and is called from its own
    worker thread by :class:`gpuwatch.monitor.nvml.sampler.Sampler`."""

    #: Shown in the app's title, e.g. ``"NVML"`` or ``"demo"``.
    label: str
    #: True when the GPUs and processes are made up (``--demo``): no real process to inspect.
    simulated: bool

    def driver_version(self) -> str | None: ...

    def device_count(self) -> int: ...

    def sample(self, index: int) -> GpuSample:
        """Everything but PCIe throughput for GPU ``index``, processes included."""
        ...

    def pcie_throughput(self, index: int) -> tuple[int | None, int | None]:
        """``(tx_bytes_per_s, rx_bytes_per_s)`` for GPU ``index``; slow."""
        ...

    def send_signal(self, pid: int, signum: int, start_time: float | None = None) -> None:
        """Send ``signum`` to ``pid``, if it is still the process that started at
        ``start_time`` (when given). Raises ``ProcessLookupError`` (gone, or its pid reused) or
        ``PermissionError``."""
        ...

    @property
    def driver_problem(self) -> str | None:
        """A problem of the whole driver, for the user; None when there is none."""
        ...

    def close(self) -> None:
        """Releases the backend; never waits on a call that hangs in the driver."""
        ...
