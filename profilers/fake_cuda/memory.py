"""The fake GPU's memory: what ``torch.cuda.memory_allocated()`` and its kin answer.

Each storage a fake GPU tensor holds counts from the op that made it until the last tensor on
it is gone, rounded up as CUDA's caching allocator rounds a block (512 bytes,
c10/cuda/CUDACachingAllocator.cpp ``kMinBlockSize``); the allocator keeps freed blocks
reserved until ``empty_cache()``, so "reserved" is the peak since then, rounded up to the 2 MiB
of a segment. The total is the simulated device's (``Properties.total_memory``)."""

from __future__ import annotations

import functools
import re
import threading
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_leaves

from profilers.fake_cuda.mode import GpuTensor
from profilers.memory.gpu_errors import out_of_memory

BLOCK_BYTES = 512
DEFAULT_BYTES = 80 * 1024**3
"""A simulated GPU's memory unless told (``--fake-memory``): an 80 GB H100's."""
SEGMENT_BYTES = 2 * 1024 * 1024


_HOST_REFUSED = re.compile(
    r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes"
)
"""The CPU allocator's error (c10/core/impl/alloc_cpu.cpp) when real values ask for more than the
host has."""


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class FakeMemory:
    """Bytes held by the fake GPU's tensors, per device: now, at peak, reserved."""

    def __init__(self, devices: int, capacity_bytes: int = DEFAULT_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self.allocated = [0] * devices
        self.peak = [0] * devices
        self.reserved = [0] * devices
        self._storages: dict[int, list[int]] = {}
        """storage address -> [device, bytes, live tensors]."""
        self._lock = threading.Lock()
        self._refs: set[weakref.ref[torch.Tensor]] = set()

    def hold(self, t: torch.Tensor, index: int, storage: torch.UntypedStorage) -> None:
        """Counts ``storage`` on GPU ``index`` while ``t`` lives: :meth:`note` for one new
        tensor whose device and storage the caller knows (real values' per-op path, where a
        ``weakref.finalize`` per tensor cost a third of an op)."""
        self._count(storage._cdata, index, storage)
        self._refs.add(weakref.ref(t, functools.partial(self._unhold, storage._cdata)))

    def _unhold(self, key: int, ref: weakref.ref[torch.Tensor]) -> None:
        self._refs.discard(ref)
        self._release(key)

    def note(self, out: object, fake_type: type[GpuTensor]) -> None:
        """Counts the storages of the fake GPU tensors in ``out`` (an op's output)."""
        for t in tree_leaves(out):
            if not isinstance(t, fake_type) or "_gpuwatch_held" in t.__dict__:
                continue
            device = t.fake_device
            if device.type != "cuda":
                continue
            storage = t.untyped_storage()
            self._count(storage._cdata, device.index or 0, storage)
            t.__dict__["_gpuwatch_held"] = True
            weakref.finalize(t, self._release, storage._cdata)

    def _count(self, key: int, index: int, storage: torch.UntypedStorage) -> None:
        """One more tensor on ``storage``: a new one is allocated on GPU ``index``, or raises
        CUDA's out-of-memory error."""
        with self._lock:
            held = self._storages.get(key)
            if held is None:
                block = _round_up(storage.nbytes(), BLOCK_BYTES)
                now = self.allocated[index]
                if now + block <= self.capacity_bytes:  # else the caching allocator's OOM
                    held = self._storages[key] = [index, block, 0]
                    self._add(index, block)
            if held is not None:
                held[2] += 1
                return
        # NB: raised with the lock let go (making the error can run a collection, whose
        # finalizers take the lock)
        raise out_of_memory(index, block, self.capacity_bytes, now)

    def host_refused(self, exc: RuntimeError, index: int) -> Exception | None:
        """What a GPU would raise where real values' host allocation failed (``exc``, the CPU
        allocator's error, on the way to GPU ``index``): CUDA's out-of-memory error where the
        simulated GPU could not hold it either; where it could, an error that says the host
        cannot; None for any other error (the caller re-raises it as it is)."""
        m = _HOST_REFUSED.search(str(exc))
        if m is None:
            return None
        block = _round_up(int(m.group(1)), BLOCK_BYTES)
        now = self.allocated[index]
        if now + block > self.capacity_bytes:
            return out_of_memory(index, block, self.capacity_bytes, now)
        return MemoryError(
            f"the fake GPU (real values) keeps GPU {index}'s tensors in this machine's memory, "
            f"which cannot hold {block:,} more bytes; the simulated GPU could "
            f"({self.capacity_bytes - now:,} bytes free). Its placeholder values need no memory"
        )

    def _add(self, index: int, nbytes: int) -> None:
        self.allocated[index] += nbytes
        self.peak[index] = max(self.peak[index], self.allocated[index])
        self.reserved[index] = max(
            self.reserved[index], _round_up(self.allocated[index], SEGMENT_BYTES)
        )

    def _release(self, key: int) -> None:
        with self._lock:
            held = self._storages.get(key)
            if held is None:
                return
            held[2] -= 1
            if held[2] == 0:
                del self._storages[key]
                self.allocated[held[0]] -= held[1]

    def reset_peak(self, index: int) -> None:
        with self._lock:
            self.peak[index] = self.allocated[index]

    def empty_cache(self) -> None:
        with self._lock:
            for i, now in enumerate(self.allocated):
                self.reserved[i] = _round_up(now, SEGMENT_BYTES)

    def stats(self, index: int) -> dict[str, object]:
        """``torch._C._cuda_memoryStats(device)``: the nested dict torch.cuda.memory_stats()
        flattens (every key memory_summary() reads; the pools are not told apart: "all")."""
        with self._lock:
            now, peak, reserved = self.allocated[index], self.peak[index], self.reserved[index]
            count = sum(1 for h in self._storages.values() if h[0] == index and h[1])

        def stat(current: int, top: int) -> dict[str, dict[str, int]]:
            one = {"current": current, "peak": top, "allocated": top, "freed": top - current}
            empty = dict.fromkeys(one, 0)
            return {"all": one, "small_pool": dict(empty), "large_pool": dict(empty)}

        return {
            "allocated_bytes": stat(now, peak),
            "active_bytes": stat(now, peak),
            "requested_bytes": stat(now, peak),
            "reserved_bytes": stat(reserved, reserved),
            "inactive_split_bytes": stat(0, 0),
            "allocation": stat(count, count),
            "active": stat(count, count),
            "segment": stat(reserved // SEGMENT_BYTES, reserved // SEGMENT_BYTES),
            "inactive_split": stat(0, 0),
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "num_sync_all_streams": 0,
            "num_device_alloc": 0,
            "num_device_free": 0,
            "max_split_size": 0,
            "oversize_allocations": stat(0, 0)["all"],
            "oversize_segments": stat(0, 0)["all"],
        }


# -- placeholders and pinned memory ---------------------------------------------------------------


@dataclass
class Placeholders:
    """What the script got back from the fake GPU that was not a real value."""

    values: int = 0
    """Scalars read on the host (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``)."""
    host_copies: int = 0
    """Tensors copied to the host (``.cpu()``, ``.tolist()``, ``.numpy()`` after them): zeros."""
    sizes: int = 0
    """Outputs whose size depends on GPU values (``nonzero``, ``t[mask]``, ``unique``): every
    element kept."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, kind: str) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)

    def to_dict(self) -> dict[str, int]:
        return {"values": self.values, "host_copies": self.host_copies, "sizes": self.sizes}


class PinnedMemory:
    """Host allocations made pinned (``pin_memory()``, ``pin_memory=True``, a non_blocking copy
    to the host), by storage address; a freed allocation stops counting."""

    def __init__(self) -> None:
        self._by_ptr: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self._lock = threading.Lock()

    def add(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        with self._lock:
            self._by_ptr[ptr] = weakref.ref(storage, functools.partial(self._drop, ptr))
        return t

    def _drop(self, ptr: int, ref: weakref.ref[torch.UntypedStorage]) -> None:
        with self._lock:
            if self._by_ptr.get(ptr) is ref:
                del self._by_ptr[ptr]

    def __contains__(self, t: torch.Tensor) -> bool:
        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return False  # a tensor with no storage of its own (sparse, nested) is never pinned
        ref = self._by_ptr.get(ptr)
        return ref is not None and ref() is not None
