"""Counters: copies per direction, syncs per cause, kernel time and ops, per line and in total."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from profilers.finite import mapping, number
from profilers.libraries import LibraryFrame, merge_frames
from profilers.names import CAUSES, DIRECTIONS
from profilers.origins import COUNTED, Loader, OriginCount, merge_loader, merge_origins


@dataclass(slots=True)
class Copies:
    """``{"count", "bytes", "pageable", "non_blocking", "time_ms"}`` of the report. Equality
    compares the counted fields only: times vary from run to run."""

    count: int = 0
    bytes: int = 0
    pageable: int = 0
    """How many touched ordinary (unpinned) host memory."""
    non_blocking: int = 0
    time_ms: float = field(default=0.0, compare=False)
    """Time of the copy ops (GPU time with CUDA events, else host time); 0 if not timed."""
    unknown_bytes: int = 0
    """How many of ``count`` had a symbolic size (a data-dependent shape under a FakeTensorMode
    with a ShapeEnv): counted, their bytes not in ``bytes``."""

    def add(self, nbytes: int | None, pageable: bool, non_blocking: bool) -> None:
        self.count += 1
        if nbytes is None:
            self.unknown_bytes += 1
        else:
            self.bytes += nbytes
        self.pageable += pageable
        self.non_blocking += non_blocking

    def merge(self, other: Copies) -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.pageable += other.pageable
        self.non_blocking += other.non_blocking
        self.time_ms += other.time_ms
        self.unknown_bytes += other.unknown_bytes

    def counts(self) -> dict[str, int]:
        """The four counted fields."""
        return {
            "count": self.count,
            "bytes": self.bytes,
            "pageable": self.pageable,
            "non_blocking": self.non_blocking,
        }

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {**self.counts(), "time_ms": round(self.time_ms, 6)}
        if self.unknown_bytes:  # additive: absent (0) in every report without such a copy
            d["unknown_bytes"] = self.unknown_bytes
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Copies:
        n, nbytes, pageable, nb = (int(number(d[k])) for k in COUNTED)
        time_ms = float(number(d.get("time_ms", 0.0)))
        return cls(n, nbytes, pageable, nb, time_ms, int(number(d.get("unknown_bytes", 0))))


@dataclass(slots=True)
class OpCount:
    """One op's entry at a line: how many ran and their kernel time, added to in place. The report's
    ``top_ops`` has it as ``{"op", "count", "kernel_time_ms"}``; frozen: ``records.OpTotal``."""

    count: int = 0
    ms: float = 0.0
    """Kernel time (GPU time with CUDA events, else the op's host time); 0 if not timed."""


@dataclass(slots=True)
class CommOp:
    """One collective's entry (``comm.by_op``): how many a rank issued and the bytes it gave."""

    count: int = 0
    bytes: int = 0


@dataclass(slots=True)
class Syncs:
    """``{"count", "by_cause": {cause: count}}`` of the report."""

    count: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)

    def add(self, cause: str) -> None:
        self.count += 1
        self.by_cause[cause] = self.by_cause.get(cause, 0) + 1

    def merge(self, other: Syncs) -> None:
        self.count += other.count
        for cause, n in other.by_cause.items():
            self.by_cause[cause] = self.by_cause.get(cause, 0) + n

    def to_dict(self) -> dict[str, object]:
        ordered = {c: self.by_cause[c] for c in CAUSES if c in self.by_cause}
        ordered.update({c: n for c, n in self.by_cause.items() if c not in ordered})
        return {"count": self.count, "by_cause": ordered}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Syncs:
        by_cause = {str(k): int(number(v)) for k, v in mapping(d["by_cause"]).items()}
        return cls(int(number(d["count"])), by_cause)


COMM_OPS = tuple(
    "all_reduce all_gather reduce_scatter broadcast reduce all_to_all gather scatter send recv "
    "barrier".split()
)
"""The collectives counted, as the report names them (``comm.by_op``)."""


@dataclass(slots=True)
class Comm:
    """``{"count", "bytes", "by_op": {op: {"count", "bytes"}}, "wait_ms"}``: the collectives a
    rank issued, the bytes it contributed, and the host time spent waiting on them (a blocking
    collective, ``work.wait()``, ``wait_tensor``). Equality leaves the time out."""

    count: int = 0
    bytes: int = 0
    by_op: dict[str, CommOp] = field(default_factory=dict)
    wait_ms: float = field(default=0.0, compare=False)

    def add(self, op: str, nbytes: int, wait_ms: float = 0.0) -> None:
        self.count += 1
        self.bytes += nbytes
        entry = self.by_op.setdefault(op, CommOp())
        entry.count += 1
        entry.bytes += nbytes
        self.wait_ms += wait_ms

    def merge(self, other: Comm) -> None:
        self.count += other.count
        self.bytes += other.bytes
        for op, e in list(other.by_op.items()):
            entry = self.by_op.setdefault(op, CommOp())
            entry.count += e.count
            entry.bytes += e.bytes
        self.wait_ms += other.wait_ms

    def copy(self) -> Comm:
        return Comm(
            self.count,
            self.bytes,
            {k: CommOp(e.count, e.bytes) for k, e in self.by_op.items()},
            self.wait_ms,
        )

    def to_dict(self) -> dict[str, object]:
        order = [op for op in COMM_OPS if op in self.by_op]
        order += [op for op in self.by_op if op not in order]
        return {
            "count": self.count,
            "bytes": self.bytes,
            "by_op": {
                op: {"count": self.by_op[op].count, "bytes": self.by_op[op].bytes} for op in order
            },
            "wait_ms": round(self.wait_ms, 6),
        }

    @classmethod
    def from_dict(cls, v: object) -> Comm:
        if not v:
            return cls()
        d = mapping(v)
        by_op = {
            str(op): CommOp(int(number(mapping(e)["count"])), int(number(mapping(e)["bytes"])))
            for op, e in mapping(d.get("by_op", {})).items()
        }
        count, nbytes, wait = d["count"], d["bytes"], d.get("wait_ms", 0.0)
        return cls(int(number(count)), int(number(nbytes)), by_op, float(number(wait)))


class CountAndMs(Protocol):
    """An op's entry, read-only: the accumulators' :class:`OpCount` or the report's frozen
    ``records.OpTotal``."""

    @property
    def count(self) -> int: ...

    @property
    def ms(self) -> float: ...


def add_entries(into: dict[str, OpCount], ops: Mapping[str, CountAndMs]) -> tuple[int, float]:
    """Adds ``{op: entry}`` entries into ``into`` (``ops`` may be growing on another thread: its
    items are taken at once); returns the count and ms added."""
    count, total = 0, 0.0
    for name, e in list(ops.items()):
        n, ms = e.count, e.ms  # NB: read once: the owner's thread may be adding to it
        mine = into.get(name)
        if mine is None:
            mine = into[name] = OpCount()
        mine.count += n
        mine.ms += ms
        count += n
        total += ms
    return count, total


class Counted:
    """What totals and a line share, read-only: copies per direction, syncs, kernel time and
    ops. Both the accumulators here and the report's records (profilers/records.py) are these."""

    __slots__ = ()
    h2d: Copies
    d2h: Copies
    d2d: Copies
    p2p: Copies
    syncs: Syncs
    kernel_time_ms: float
    ops: int
    comm: Comm

    def copies(self, way: str) -> Copies:
        c: Copies = getattr(self, way)
        return c

    @property
    def bytes_moved(self) -> int:
        return sum(self.copies(way).bytes for way in DIRECTIONS)

    def counters_dict(self) -> dict[str, object]:
        d: dict[str, object] = {way: self.copies(way).to_dict() for way in DIRECTIONS}
        d["syncs"] = self.syncs.to_dict()
        d["comm"] = self.comm.to_dict()
        d["kernel_time_ms"] = round(self.kernel_time_ms, 6)
        d["ops"] = self.ops
        return d


class Lined:
    """What a line's accumulator and its report record share, read-only."""

    __slots__ = ()
    file: str
    line: int
    backward: Mapping[str, CountAndMs]
    """op -> entry (count, ms) of the backward of the line's forward ops."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.file, self.line)

    @property
    def backward_ops(self) -> int:
        return int(sum(e.count for e in self.backward.values()))

    @property
    def backward_ms(self) -> float:
        return float(sum(e.ms for e in self.backward.values()))


class Counters(Counted):
    """Everything counted for one line, or for the whole run."""

    __slots__ = (
        "comm",
        "d2d",
        "d2h",
        "h2d",
        "kernel_time_ms",
        "op_breakdown",
        "ops",
        "p2p",
        "syncs",
    )

    def __init__(self) -> None:
        self.h2d = Copies()
        self.d2h = Copies()
        self.d2d = Copies()
        self.p2p = Copies()
        self.syncs = Syncs()
        self.comm = Comm()
        self.kernel_time_ms = 0.0
        self.ops = 0
        self.op_breakdown: dict[str, OpCount] = {}
        """op name -> its count and kernel time."""

    def merge(self, other: Counters) -> None:
        self.merge_counts(other)
        add_entries(self.op_breakdown, other.op_breakdown)

    def merge_counts(self, other: Counted) -> None:
        """Adds the copies, syncs, kernel time and ops of ``other`` (counters or a record)."""
        for way in DIRECTIONS:
            self.copies(way).merge(other.copies(way))
        self.syncs.merge(other.syncs)
        self.comm.merge(other.comm)
        self.kernel_time_ms += other.kernel_time_ms
        self.ops += other.ops


OTHER_OPS = "(other ops)"
"""The op name under which ops beyond a report's top ones are summed when it is read back."""


MAX_STACKS = 8
"""Distinct caller chains kept per line."""


class LineStats(Lined, Counters):
    """Counters for one user source line."""

    __slots__ = (
        "backward",
        "callers",
        "copy_dtypes",
        "file",
        "function",
        "libraries",
        "line",
        "loader",
        "node_stems",
        "origins",
        "source",
        "stacks",
        "steps_active",
        "last_step",
    )

    def __init__(self, file: str, line: int, function: str, stack: list[str] | None = None):
        super().__init__()
        self.steps_active = 0
        """In how many steps it copied or synced (step 0: before the first's end); 1: no loop."""
        self.last_step = -1
        """The step of its latest copy or sync (the recorder's, for counting steps_active)."""
        self.file, self.line, self.function = file, line, function
        self.stacks: list[list[str]] = [stack] if stack else []
        """Each distinct chain of user callers it was reached from (innermost first; MAX_STACKS)."""
        self.callers: set[tuple[str, int] | None] = set()
        """The recorder's keys of the chains in ``stacks`` (the next user frame up)."""
        self.source = ""
        self.copy_dtypes: dict[str, int] = {}
        """Bytes copied (any direction) per source dtype, e.g. ``{"float32": 262144}``."""
        self.backward: dict[str, OpCount] = {}
        """The backward of this line's forward ops, per op (also counted at ``.backward()``'s)."""
        self.node_stems: set[str] = set()
        """Kinds of autograd node this line's ops are known to make (the profiler's cache)."""
        self.libraries: dict[tuple[str, int], LibraryFrame] = {}
        """The library frames that made this line's copies and syncs (profilers/libraries.py)."""
        self.origins: dict[str, OriginCount] = {}
        """Its host-to-GPU copies by where the tensor came from (profilers/origins.py)."""
        self.loader: Loader | None = None
        """The settings of the DataLoader this line pulls batches from (profilers/origins.py)."""

    @property
    def stack(self) -> list[str]:
        """The first chain of callers seen."""
        return self.stacks[0] if self.stacks else []

    def add_stack(self, chain: list[str]) -> None:
        if len(self.stacks) < MAX_STACKS and chain not in self.stacks:
            self.stacks.append(chain)

    def settle(self) -> None:
        """Sets ``ops`` and ``kernel_time_ms`` from the per-op entries (the recorder's hot path
        updates only those)."""
        self.ops = int(sum(e.count for e in self.op_breakdown.values()))
        self.kernel_time_ms = float(sum(e.ms for e in self.op_breakdown.values()))

    def merge(self, other: Counters) -> None:
        super().merge(other)
        if isinstance(other, LineStats):
            # NB: the largest, not the sum: two threads running the line in the same step
            # are one step.
            self.steps_active = max(self.steps_active, other.steps_active)
            for chain in other.stacks:
                self.add_stack(chain)
            for dtype, n in other.copy_dtypes.items():
                self.copy_dtypes[dtype] = self.copy_dtypes.get(dtype, 0) + n
            merge_frames(self.libraries, other.libraries.values())
            self.merge_backward(other.backward)
            merge_origins(self.origins, other.origins)
            self.loader = merge_loader(self.loader, other.loader)

    def add_ops(self, ops: Mapping[str, CountAndMs]) -> None:
        """Counts ``{op: entry}`` as this line's own ops."""
        n, ms = add_entries(self.op_breakdown, ops)
        self.ops += n
        self.kernel_time_ms += ms

    def merge_backward(self, ops: Mapping[str, CountAndMs]) -> None:
        add_entries(self.backward, ops)
