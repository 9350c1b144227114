"""Where each host-to-GPU copy's tensor came from, decided at the copy: the fix follows from it
(a loader's batch: pin it; ``torch.randn`` on the host: make it on the GPU; ``model.to``: none).

Fed by the host storages factory ops made (``note_made``: every other op pays one comparison)
and those a DataLoader returned (``note_batch``: once per batch), each a weak reference dropped
when torch frees the storage, so a reused address is never taken for the old tensor; the memory
tracker's record of every op's storages answers too, when on.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from types import FrameType
from typing import Any

import torch

from profilers.memory.tracker import MemoryTracker
from profilers.origins import FACTORY, HOST, LOADER, PARAMETER, PINNED, Loader
from profilers.stats import LineStats

Tensor = torch.Tensor

FACTORY_OPS = frozenset(
    "arange empty empty_like empty_strided eye full full_like lift_fresh lift_fresh_copy "
    "linspace logspace new_empty new_full new_ones new_zeros ones ones_like rand rand_like "
    "randint randint_like randn randn_like randperm scalar_tensor tensor zeros zeros_like".split()
)
"""Ops that make a tensor from nothing but their arguments (by their name before the overload:
``randn`` of ``randn.default``): made on the host, such a tensor could have been made on the GPU."""

MAX_KEPT = 100_000
"""Live storages remembered at most (a script that keeps a million small host tensors alive
stops being recorded, its copies' origins then read ``host``)."""

MAX_BATCH_TENSORS = 256
"""Tensors of one batch remembered at most (nested dicts, lists and tuples are walked)."""

_MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")


def is_factory(name: str) -> bool:
    """Whether the op named ``name`` (``randn.default``) is a factory op."""
    return name.split(".", 1)[0] in FACTORY_OPS


class Maker(weakref.ref):  # type: ignore[type-arg]  # of an UntypedStorage
    """One storage's maker: the line (``LineStats``), the op and the origin."""

    __slots__ = ("key", "line", "op", "origin")

    line: LineStats
    op: str
    origin: str
    key: int


class Provenance:
    """Storages of the host tensors the factory ops made and the loaders returned, live ones
    only (a weak reference each, whose callback forgets it when torch frees the storage)."""

    def __init__(self) -> None:
        self.storages: dict[int, Maker] = {}

    def _forget(self, made: Maker) -> None:
        if self.storages.get(made.key) is made:
            self.storages.pop(made.key, None)

    def note(self, line: LineStats, op: str, origin: str, t: Tensor) -> None:
        """Notes that ``line``'s ``op`` made ``t`` (a host tensor), of ``origin``."""
        if len(self.storages) >= MAX_KEPT:
            return
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # sparse, nested or functional tensors: no storage of their own
        key = storage._cdata
        made = Maker(storage, self._forget)
        made.line, made.op, made.origin, made.key = line, op, origin, key
        self.storages[key] = made  # NB: a batch's tensor made by a factory is the batch's now

    def of(self, t: Tensor) -> Maker | None:
        try:
            return self.storages.get(t.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError, TypeError):
            return None


def note_made(provenance: Provenance, line: LineStats, name: str, out: object) -> None:
    """A factory op's output, if on the host (one on a GPU needs no fix). NB: NumPy's data
    (``torch.from_numpy``) reaches the dispatcher as ``lift_fresh`` too, in memory NumPy owns
    (not resizable): no factory's, its origin stays ``host``."""
    if isinstance(out, Tensor) and out.device.type == "cpu":
        op = name.split(".", 1)[0]
        if op in LIFTED and not _resizable(out):
            return
        provenance.note(line, op, FACTORY, out)


#: The ops Python data (``torch.tensor(0.5)``, a list) and NumPy arrays reach the dispatcher as.
LIFTED = frozenset({"lift_fresh", "lift_fresh_copy"})


def _resizable(t: Tensor) -> bool:
    try:
        return bool(t.untyped_storage().resizable())
    except (RuntimeError, NotImplementedError, TypeError):
        return True


def batch_tensors(batch: object, limit: int = MAX_BATCH_TENSORS) -> list[Tensor]:
    """The tensors of a batch: a tensor, or nested mappings (a dict, HF's ``BatchEncoding``),
    lists and tuples (named ones too) of them; at most ``limit``, four levels deep."""
    found: list[Tensor] = []

    def walk(x: object, depth: int) -> None:
        if len(found) >= limit:
            return
        if isinstance(x, Tensor):
            found.append(x)
        elif depth < 4 and isinstance(x, Mapping):
            for v in list(x.values()):
                walk(v, depth + 1)
        elif depth < 4 and isinstance(x, (list, tuple)):
            for v in x:
                walk(v, depth + 1)

    walk(batch, 0)
    return found


def loader_settings(it: object) -> Loader:
    """The settings of the DataLoader behind the iterator ``it`` (``_BaseDataLoaderIter`` keeps
    the loader's own, torch/utils/data/dataloader.py), None where it has none."""
    workers = getattr(it, "_num_workers", None)
    prefetch = getattr(it, "_prefetch_factor", None)
    batch_size = getattr(getattr(it, "_index_sampler", None), "batch_size", None)
    return {
        "num_workers": int(workers) if isinstance(workers, int) else None,
        "pin_memory": bool(getattr(it, "_pin_memory", False)),
        "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
        "prefetch_factor": int(prefetch) if isinstance(prefetch, int) and workers else None,
        "batch_size": int(batch_size) if isinstance(batch_size, int) else None,
    }


def note_batch(
    provenance: Provenance, line: LineStats, it: Any, batch: object, wait_ns: int
) -> None:
    """A batch the loader iterator ``it`` returned at ``line`` (the ``for`` line): its tensors'
    storages are the loader's, and the line keeps the loader's settings."""
    for t in batch_tensors(batch):
        if t.device.type == "cpu":
            provenance.note(line, "DataLoader", LOADER, t)
    found = line.loader
    if found is None:
        found = line.loader = {**loader_settings(it), "iterators": 0, "batches": 0, "wait_ms": 0.0}
    if getattr(it, "_gpuwatch_seen", False) is not True:
        # NB: one mark per iterator (an epoch): a new one starts the workers anew unless
        # persistent_workers; an attribute of our own on the loader's iterator, not the batch
        try:
            it._gpuwatch_seen = True
            found["iterators"] = (found["iterators"] or 0) + 1
        except AttributeError:
            pass  # an iterator with __slots__: its epochs go uncounted
    found["batches"] = (found["batches"] or 0) + 1
    found["wait_ms"] = round((found["wait_ms"] or 0.0) + wait_ns / 1e6, 3)


def source_of(args: tuple[object, ...]) -> Tensor | None:
    """The host tensor a host-to-GPU copy read: the first host tensor among ``args`` (``_to_copy``'s
    ``self``; ``copy_``'s ``src``; an index moved by ``index``)."""
    for a in args:
        for b in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(b, Tensor) and b.device.type == "cpu":
                return b
    return None


def origin_of(
    src: Tensor | None,
    pageable: bool,
    frame: FrameType | None,
    provenance: Provenance | None,
    memory: MemoryTracker | None,
    line: LineStats | None = None,
) -> tuple[str, LineStats | None, str | None]:
    """``(origin, the maker's line or None, the maker's op or None)`` of a host-to-GPU copy of
    ``src``, which read pageable memory or not, called from ``frame`` at ``line``."""
    if (
        isinstance(src, torch.nn.Parameter)
        or (frame is not None and frame.f_code.co_filename.endswith(_MODULE_FILE))
        or called_from(frame, _SERIALIZATION_FILE, RESTORE_DEPTH)
    ):
        # NB: Module.to/cuda/_apply move each parameter and buffer from a function defined in
        # torch/nn/modules/module.py (convert, a lambda); buffers are not Parameters. torch.load
        # restoring a checkpoint onto the GPU is a one-time move too: its bytes were made by an
        # ``empty`` inside the load (torch/serialization.py), no factory of the user's.
        return PARAMETER, None, None
    if src is None:
        return HOST, None, None
    maker = provenance.of(src) if provenance is not None else None
    if maker is not None and maker.origin == LOADER:
        return LOADER, maker.line, maker.op
    if not pageable:
        return PINNED, None, None
    if maker is not None:
        return FACTORY, maker.line, maker.op
    made = memory.of(src) if memory is not None else None  # it saw every op's storages
    # NB: past the provenance, a lifted tensor (lift_fresh) may be NumPy's data as well as
    # torch.tensor's: only the provenance, which saw its memory, tells; here it is a host's
    if made is not None and is_factory(made.op) and not _lifted(made.op):
        return FACTORY, made.line, made.op
    # NB: made on the host from a factory's tensor by other ops (torch.randn(n) * 2, at its
    # line or another): the fix is the factory's, on the device, and the rest with it; the
    # line that made it (else the copy's own) ran a factory op
    maker_line = made.line if made is not None else line
    factory = _factory_at(maker_line)
    if factory is not None:
        return FACTORY, maker_line, factory
    return HOST, None if made is None else made.line, None if made is None else made.op


_SERIALIZATION_FILE = os.path.join("torch", "serialization.py")

RESTORE_DEPTH = 12
"""Frames walked up from a host-to-GPU copy for torch.load's: its storage's ``.to(device)``
(torch/_utils.py ``_to``) is 6 frames below ``_load`` in torch 2.13, the fake GPU's rebuild 5."""


def called_from(frame: FrameType | None, file: str, depth: int) -> bool:
    """Whether ``frame`` or one of the ``depth - 1`` frames above it runs code of ``file``."""
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(file):
            return True
        frame = frame.f_back
    return False


def _factory_at(line: LineStats | None) -> str | None:
    """The first factory op ``line`` (a ``LineStats``) ran, by name (``randn``), if any."""
    for name in list(getattr(line, "op_breakdown", ())):
        if is_factory(name) and not _lifted(name):
            return str(name).split(".", 1)[0]
    return None


def _lifted(name: str) -> bool:
    return str(name).split(".", 1)[0] in LIFTED
