"""Where a line's host-to-GPU copies came from: the report's ``origins`` of a line, and the
settings of the DataLoader a line pulls its batches from (``loader``). Plain data, no torch: a
saved report's hints read them (gpuwatch/analysis/hints.py), and the fix a copy needs follows
from its origin, not from the ops its line happened to run.

The origins (the recorder decides, at each copy only: profilers/counting/origins.py):

* ``parameter``: a module's parameter or buffer moved by ``Module.to``/``.cuda()`` (or an
  ``nn.Parameter`` moved by hand, or a checkpoint's tensors restored onto the GPU by
  ``torch.load``): a one-time move, never a loop's;
* ``loader``: a tensor of a batch a DataLoader returned (its collate, its pinning);
* ``factory``: made on the host by a factory op (``torch.randn``, ``torch.zeros``,
  ``torch.tensor``...) at ``made_at``, perhaps another line;
* ``pinned``: another tensor in pinned memory (a buffer the script pinned itself);
* ``host``: any other host tensor (made by other ops, from NumPy, before the profile began).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from profilers.finite import mapping, number

PARAMETER = "parameter"
LOADER = "loader"
FACTORY = "factory"
PINNED = "pinned"
HOST = "host"
ORIGINS = (PARAMETER, LOADER, FACTORY, PINNED, HOST)
#: The counted fields of a copy's record, here and in ``stats.Copies``.
COUNTED = ("count", "bytes", "pageable", "non_blocking")


@dataclass(slots=True)
class OriginCount:
    """The host-to-GPU copies of one origin at a line: ``{"count", "bytes", "pageable",
    "non_blocking", "made_at", "op"}`` in the report."""

    count: int = 0
    bytes: int = 0
    pageable: int = 0
    """How many came from ordinary (unpinned) host memory."""
    non_blocking: int = 0
    made_at: str | None = None
    """``file:line`` of the line whose op made the (first) tensor copied, where known."""
    op: str | None = None
    """The op that made it (``randn``), or ``DataLoader`` for a batch; None: not known."""

    def add(
        self, nbytes: int, pageable: bool, non_blocking: bool, made_at: str | None, op: str | None
    ) -> None:
        self.count += 1
        self.bytes += nbytes
        self.pageable += pageable
        self.non_blocking += non_blocking
        if self.made_at is None and made_at is not None:
            self.made_at, self.op = made_at, op

    def merge(self, other: OriginCount) -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.pageable += other.pageable
        self.non_blocking += other.non_blocking
        if self.made_at is None:
            self.made_at, self.op = other.made_at, other.op

    def copy(self) -> OriginCount:
        return replace(self)

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "count": self.count,
            "bytes": self.bytes,
            "pageable": self.pageable,
            "non_blocking": self.non_blocking,
        }
        if self.made_at is not None:
            d["made_at"] = self.made_at
            d["op"] = self.op
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> OriginCount:
        n, nbytes, pageable, nb = (int(number(d[k])) for k in COUNTED)
        made, op = (None if d.get(k) is None else str(d[k]) for k in ("made_at", "op"))
        return cls(n, nbytes, pageable, nb, made, op)


def merge_origins(into: dict[str, OriginCount], other: dict[str, OriginCount]) -> None:
    for name, c in other.items():
        found = into.get(name)
        if found is None:
            into[name] = c.copy()
        else:
            found.merge(c)


def origins_dict(origins: dict[str, OriginCount]) -> dict[str, object]:
    return {k: origins[k].to_dict() for k in ORIGINS if k in origins}


def origins_from(d: object) -> dict[str, OriginCount]:
    if not d:
        return {}
    if not isinstance(d, dict):
        raise ValueError("origins must be an object")
    return {str(k): OriginCount.from_dict(mapping(v)) for k, v in d.items()}


LOADER_FIELDS: dict[str, type] = {
    "num_workers": int,
    "pin_memory": bool,
    "persistent_workers": bool,
    "prefetch_factor": int,
    "batch_size": int,
    "iterators": int,
    "batches": int,
    "wait_ms": float,
}
Loader = dict[str, float | None]
"""A line's ``loader``: the settings of the DataLoader whose batches it pulled (the last seen),
how many iterators were made over it (epochs: each starts its workers anew without
``persistent_workers``), how many batches it returned, and the host's wait for them (``wait_ms``:
with or without a step clock, which ``--fake-cuda`` alone has not). ``prefetch_factor`` and
``batch_size`` are null where the loader has none (no workers; a batch sampler)."""


def loader_from(d: object) -> Loader | None:
    if not d:
        return None
    if not isinstance(d, dict):
        raise ValueError("loader must be an object")
    out: Loader = {}
    for name, kind in LOADER_FIELDS.items():
        v = d.get(name)
        if v is not None and kind is bool and not isinstance(v, bool):
            raise ValueError(f"loader.{name} must be true or false, not {v!r}")
        out[name] = None if v is None else kind(v)
    return out


def merge_loader(a: Loader | None, b: Loader | None) -> Loader | None:
    """One line's loader twice (two threads, two ranks): either's settings, the counts summed."""
    if a is None or b is None:
        either = a if a is not None else b
        return dict(either) if either else None
    out = dict(a)
    for k in ("iterators", "batches", "wait_ms"):
        out[k] = (a.get(k) or 0) + (b.get(k) or 0)
    return out
