"""The recent history of every GPU, one store for both apps (``top`` and ``--live``): per GPU, the
newest utilisation, memory and PCIe values, oldest first, for the cards' graphs."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuwatch.monitor.nvml.samples import GpuSample, Snapshot

#: How long a history reaches back.
HISTORY_SECONDS = 300.0


@dataclass
class GpuHistory:
    """One GPU's series, each holding at most ``maxlen`` values."""

    maxlen: int
    util_pct: deque[float] = field(init=False)
    memory_pct: deque[float] = field(init=False)
    pcie_bytes_per_s: deque[float] = field(init=False)
    """PCIe traffic, both directions together."""

    def __post_init__(self) -> None:
        self.util_pct = deque(maxlen=self.maxlen)
        self.memory_pct = deque(maxlen=self.maxlen)
        self.pcie_bytes_per_s = deque(maxlen=self.maxlen)

    def add(self, g: GpuSample) -> None:
        # NB: a value NVML does not report draws as 0: a gap in a sparkline would read as idle too.
        self.util_pct.append(float(g.gpu_util_pct or 0))
        self.memory_pct.append(g.memory_used_pct or 0.0)
        self.pcie_bytes_per_s.append(
            float((g.pcie_rx_bytes_per_s or 0) + (g.pcie_tx_bytes_per_s or 0))
        )


class History:
    """Every GPU's :class:`GpuHistory`, :data:`HISTORY_SECONDS` long at ``interval_s``."""

    def __init__(self, interval_s: float) -> None:
        self.maxlen = max(1, int(HISTORY_SECONDS / interval_s))
        self._gpus: dict[int, GpuHistory] = {}

    def add(self, snap: Snapshot) -> None:
        for g in snap.gpus:
            self.of(g.index).add(g)

    def of(self, index: int) -> GpuHistory:
        found = self._gpus.get(index)
        if found is None:
            found = self._gpus[index] = GpuHistory(self.maxlen)
        return found
