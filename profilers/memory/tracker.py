"""Which line made each tensor's storage, and the GPU bytes each line holds now and at the peak.

Fed by the hot path with every op's outputs (``made``). A storage is counted once, from the op
that made it until torch frees it: views, in-place ops and ``out=`` ops hand back a storage
already known, so they add nothing. NB: a storage's Python object lives exactly as long as the
storage itself (torch keeps it while any tensor holds the storage, c10 ``PyObjectSlot``), so a
weak reference to it says when the memory goes back to the allocator, whichever thread frees it.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator

import torch

from profilers.stats import LineStats

Tensor = torch.Tensor

MOVES = frozenset({"_to_copy", "copy_", "_copy_from", "to", "_pin_memory"})
"""Ops whose output is an input moved (another device, dtype or pinning): the line "moved" it."""


class Made(weakref.ref):  # type: ignore[type-arg]  # of an UntypedStorage
    """One storage: the line and op that made it, its device and size; a weak reference to the
    storage itself, whose callback says it was freed (one object per storage, no closure)."""

    __slots__ = ("index", "key", "line", "nbytes", "op")

    line: LineStats
    """The recorder's line (``LineStats``) whose op made the storage."""
    op: str
    key: int
    index: int
    """The GPU's index, -1 for a storage on the host (kept for provenance only)."""
    nbytes: int


LineKey = tuple["LineStats", int]
"""(the line's ``LineStats``, the GPU's index): one line can hold memory on several GPUs."""


class MemoryTracker:
    """Storages by address, and GPU bytes per line and device: now, each line's most, and at
    each device's peak (the lines holding it then, and ``step_of()``, the recorder's step)."""

    def __init__(self, step_of: Callable[[], int] = lambda: 0) -> None:
        self._step_of = step_of
        self._lock = threading.Lock()
        self.storages: dict[int, Made] = {}
        """``untyped_storage()._cdata`` -> what made it, for the storages alive now."""
        self.live: dict[LineKey, int] = {}
        self.line_max: dict[LineKey, int] = {}
        """Each line's own most bytes held at once over the run (not necessarily at the peak)."""
        self.total: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.peak_step: dict[int, int] = {}
        self.at_peak: dict[int, dict[LineKey, int]] = {}
        """Per device, what each line held when the device was at its peak."""
        self.capacity: dict[int, int] = {}
        """Each GPU's memory size (the simulated one under ``--fake-cuda``)."""
        self.simulated = False
        """The GPUs were simulated: every figure is a prediction."""
        self._pending: deque[Made] = deque()
        """GPU storages freed, their bytes not yet taken off (see ``_freed``)."""
        self._rising: set[int] = set()
        """Devices at a new peak whose lines are not copied yet: the copy waits for the first
        free after it (allocations alone only raise the peak, so it is exact then), one copy
        per peak instead of one per allocation."""

    # -- the hot path ---------------------------------------------------------------------------

    def made(self, line: LineStats, op: str, out: object) -> None:
        """Notes the storages of the tensors an op returned (a tensor, or a tuple/list of them)."""
        if isinstance(out, Tensor):
            self._one(line, op, out)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, Tensor):
                    self._one(line, op, t)

    def _one(self, line: LineStats, op: str, t: Tensor) -> None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # sparse, nested or functional tensors: no storage of their own
        key = storage._cdata
        if key in self.storages:
            return
        device = t.device
        made = Made(storage, self._freed)
        made.line = line
        made.op = op.split(".", 1)[0]
        made.key = key
        made.nbytes = nbytes = storage.nbytes()
        if device.type != "cuda":
            made.index = -1
            self.storages[key] = made  # NB: one dict store, atomic under the GIL
            return
        made.index = index = device.index or 0
        self.storages[key] = made
        if nbytes:
            with self._lock:
                self._drain()
                self._add(line, index, nbytes)

    def _add(self, line: LineStats, index: int, nbytes: int) -> None:
        k = (line, index)
        now = self.live[k] = self.live.get(k, 0) + nbytes
        if now > self.line_max.get(k, 0):
            self.line_max[k] = now
        total = self.total[index] = self.total.get(index, 0) + nbytes
        if total > self.peak.get(index, 0):
            self.peak[index] = total
            self.peak_step[index] = self._step_of()
            self._rising.add(index)

    def _freed(self, made: Made) -> None:
        """The weak reference's callback, on the thread that freed the storage. NB: it takes no
        lock: a collection can free a storage, and run this, in any allocation, also one made
        while this thread holds the lock. The address goes at once (torch frees it after this
        returns, so no new storage has it yet); the bytes wait in ``_pending`` for the next
        allocation or read, which takes them off first, in order."""
        if self.storages.get(made.key) is made:
            self.storages.pop(made.key, None)
        if made.index >= 0 and made.nbytes:
            self._pending.append(made)

    def _drain(self) -> None:
        """Takes the storages freed since the last call off their lines (the lock held)."""
        pending = self._pending
        while pending:
            made = pending.popleft()
            index = made.index
            if index in self._rising:
                self._rising.discard(index)
                self.at_peak[index] = self._held_on(index)
            k = (made.line, index)
            left = self.live[k] - made.nbytes
            if left:
                self.live[k] = left
            else:
                del self.live[k]
            self.total[index] -= made.nbytes

    def _held_on(self, index: int) -> dict[LineKey, int]:
        return {k: n for k, n in self.live.items() if k[1] == index}

    # -- reading --------------------------------------------------------------------------------

    def of(self, t: Tensor) -> Made | None:
        """What made ``t``'s storage, if an op seen while tracking did."""
        try:
            return self.storages.get(t.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError, TypeError):
            return None

    def held_now(self, index: int) -> dict[LineKey, int]:
        with self._lock:
            self._drain()
            return self._held_on(index)

    def glance(
        self,
    ) -> tuple[dict[LineKey, int], dict[LineKey, int], dict[int, int], dict[int, int]]:
        """Copies of the bytes per line now, each line's most, and each GPU's total now and peak
        so far (no copy of the lines at a peak: a live view takes it several times a second)."""
        with self._lock:
            self._drain()
            return dict(self.live), dict(self.line_max), dict(self.total), dict(self.peak)

    def peaks(self) -> Iterator[tuple[int, int, int, dict[LineKey, int]]]:
        """(device index, peak bytes, step of the peak, lines held at it), per GPU seen."""
        with self._lock:
            self._drain()
            for index in sorted(self.peak):
                if index in self._rising:  # at its peak now: the copy is taken here
                    self._rising.discard(index)
                    self.at_peak[index] = self._held_on(index)
                held = self.at_peak.get(index, {})
                yield index, self.peak[index], self.peak_step.get(index, 0), dict(held)


def by_line(held: dict[LineKey, int]) -> dict[tuple[str, int], tuple[LineStats, int]]:
    """Bytes per (file, line): the lines of several threads and GPUs summed."""
    out: dict[tuple[str, int], tuple[LineStats, int]] = {}
    for (line, _), n in held.items():
        k = (line.file, line.line)
        prev = out.get(k)
        out[k] = (line, n + (prev[1] if prev else 0))
    return out
