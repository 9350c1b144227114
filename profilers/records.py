"""The report's records: frozen, built once when a report is made (or read), never updated.

The profiler counts into mutable accumulators (``stats.LineStats``); a report holds these records
instead, so what a renderer reads cannot change under it. Read back from JSON, the ops beyond a
line's top ones are one ``(other ops)`` entry, so its counts and times still add up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from profilers.finite import iterable, mapping, number
from profilers.libraries import LibraryFrame, top_frames
from profilers.names import DIRECTIONS
from profilers.origins import Loader, OriginCount, loader_from, origins_dict, origins_from
from profilers.stats import (
    OTHER_OPS,
    Comm,
    Copies,
    Counted,
    Counters,
    Lined,
    LineStats,
    OpCount,
    Syncs,
)


@dataclass(frozen=True, slots=True)
class OpTotal:
    """One op's entry at a line, frozen: the record of an :class:`~profilers.stats.OpCount`."""

    count: int
    ms: float
    """Kernel time (``kernel_time_ms`` in ``top_ops``)."""


OpTimes = dict[str, OpTotal]
"""op name -> its count and kernel time."""


def _frozen(ops: dict[str, OpCount]) -> OpTimes:
    return {k: OpTotal(int(e.count), float(e.ms)) for k, e in list(ops.items())}


def _counted(d: Mapping[str, object]) -> dict[str, Any]:
    return {
        **{way: Copies.from_dict(mapping(d[way])) for way in DIRECTIONS},
        "syncs": Syncs.from_dict(mapping(d["syncs"])),
        "comm": Comm.from_dict(d.get("comm")),
        "kernel_time_ms": float(number(d["kernel_time_ms"])),
        "ops": int(number(d["ops"])),
    }


def _copied(c: Counters) -> dict[str, Any]:
    return {
        **{way: replace(c.copies(way)) for way in DIRECTIONS},
        "syncs": Syncs(c.syncs.count, dict(c.syncs.by_cause)),
        "comm": c.comm.copy(),
        "kernel_time_ms": c.kernel_time_ms,
        "ops": c.ops,
    }


@dataclass(frozen=True)
class Totals(Counted):
    """The whole run's counts (``totals`` in the report)."""

    h2d: Copies = field(default_factory=Copies)
    d2h: Copies = field(default_factory=Copies)
    d2d: Copies = field(default_factory=Copies)
    p2p: Copies = field(default_factory=Copies)
    syncs: Syncs = field(default_factory=Syncs)
    kernel_time_ms: float = 0.0
    ops: int = 0
    comm: Comm = field(default_factory=Comm)

    @classmethod
    def of(cls, counters: Counters) -> Totals:
        return cls(**_copied(counters))

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Totals:
        return cls(**_counted(d))


def _top(ops: OpTimes, n: int) -> list[dict[str, object]]:
    ranked = sorted(ops.items(), key=lambda kv: (-kv[1].ms, -kv[1].count))[:n]
    return [{"op": k, "count": int(e.count), "kernel_time_ms": round(e.ms, 6)} for k, e in ranked]


def _with_rest(top: object, count: int, ms: float) -> OpTimes:
    """The top ops read back, plus one ``(other ops)`` entry for what the cut left out."""
    ops: OpTimes = {
        str(e["op"]): OpTotal(int(number(e["count"])), float(number(e["kernel_time_ms"])))
        for e in map(mapping, iterable(top))
    }
    rest_n = count - sum(e.count for e in ops.values())
    if rest_n > 0:
        rest_ms = max(0.0, ms - sum(e.ms for e in ops.values()))
        # NB: a report read back and written again can list "(other ops)" among its top ones:
        # what this cut left out adds to it.
        shown = ops.get(OTHER_OPS, OpTotal(0, 0.0))
        ops[OTHER_OPS] = OpTotal(shown.count + rest_n, shown.ms + rest_ms)
    return ops


@dataclass(frozen=True)
class Line(Lined, Counted):
    """One line of the user's code and everything charged to it (an entry of ``Report.lines``;
    the JSON names the list ``sites``)."""

    file: str
    line: int
    function: str
    source: str = ""
    stack: tuple[str, ...] = ()
    """The first chain of user callers (innermost first)."""
    stacks: tuple[tuple[str, ...], ...] = ()
    """Every distinct chain of callers the line was reached from (at most 8)."""
    h2d: Copies = field(default_factory=Copies)
    d2h: Copies = field(default_factory=Copies)
    d2d: Copies = field(default_factory=Copies)
    p2p: Copies = field(default_factory=Copies)
    syncs: Syncs = field(default_factory=Syncs)
    kernel_time_ms: float = 0.0
    ops: int = 0
    comm: Comm = field(default_factory=Comm)
    op_breakdown: OpTimes = field(default_factory=dict)
    copy_dtypes: dict[str, int] = field(default_factory=dict)
    """Bytes copied (any direction) per source dtype."""
    by_rank: dict[str, dict[str, object]] = field(default_factory=dict)
    """In a merged report: each rank's counters for this line, keyed by the rank as a string."""
    backward: OpTimes = field(default_factory=dict)
    """The backward of this line's forward ops, per op; these ops are also counted, in full, at
    the line that called ``.backward()``."""
    steps_active: int = 0
    """In how many steps the line copied or synced (see ``LineStats.steps_active``)."""
    library: tuple[LibraryFrame, ...] = ()
    """The library frames that made the line's copies and syncs, most syncs first (at most
    MAX_LIBRARY_FRAMES): ``transformers/trainer.py:2410`` beside ``train.py:31``."""
    origins: dict[str, OriginCount] = field(default_factory=dict)
    """Its host-to-GPU copies by where the tensor came from (profilers/origins.py): the fix a
    copy needs follows from it."""
    loader: Loader | None = None
    """The settings of the DataLoader whose batches this line pulled (profilers/origins.py)."""

    @classmethod
    def of(cls, s: LineStats) -> Line:
        """The record of an accumulator (its counts as they are now)."""
        return cls(
            file=s.file,
            line=s.line,
            function=s.function,
            source=s.source,
            stack=tuple(s.stack),
            stacks=tuple(tuple(c) for c in s.stacks),
            **_copied(s),
            op_breakdown=_frozen(s.op_breakdown),
            copy_dtypes=dict(s.copy_dtypes),
            backward=_frozen(s.backward),
            steps_active=s.steps_active,
            library=tuple(top_frames(s.libraries.values())),
            origins={k: c.copy() for k, c in s.origins.items()},
            loader=dict(s.loader) if s.loader else None,
        )

    def to_dict(self, top_ops: int = 8) -> dict[str, object]:
        d: dict[str, object] = {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "source": self.source,
            "stack": list(self.stack),
            "stacks": [list(c) for c in self.stacks],
            **self.counters_dict(),
            "top_ops": _top(self.op_breakdown, top_ops),
            "copy_dtypes": dict(self.copy_dtypes),
            "steps_active": self.steps_active,
            "library": [f.to_dict() for f in self.library],
        }
        if self.origins:  # additive: absent where the line copied nothing to a GPU
            d["origins"] = origins_dict(self.origins)
        if self.loader:
            d["loader"] = dict(self.loader)
        if self.by_rank:
            d["by_rank"] = self.by_rank
        if self.backward:
            d["backward"] = {
                "ops": self.backward_ops,
                "kernel_time_ms": round(self.backward_ms, 6),
                "top_ops": _top(self.backward, top_ops),
            }
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Line:
        counted = _counted(d)
        backward = mapping(d.get("backward") or {})
        return cls(
            file=str(d["file"]),
            line=int(number(d["line"])),
            function=str(d["function"]),
            source=str(d.get("source", "")),
            stack=tuple(str(f) for f in iterable(d.get("stack", []))),
            stacks=tuple(
                tuple(str(f) for f in iterable(c))
                for c in iterable(d.get("stacks", [d["stack"]] if d.get("stack") else []))
            ),
            **counted,
            op_breakdown=_with_rest(
                d.get("top_ops", []), counted["ops"], counted["kernel_time_ms"]
            ),
            copy_dtypes={
                str(k): int(number(v)) for k, v in mapping(d.get("copy_dtypes", {})).items()
            },
            by_rank={str(k): dict(mapping(v)) for k, v in mapping(d.get("by_rank") or {}).items()},
            steps_active=int(number(d.get("steps_active", 0))),
            library=tuple(
                LibraryFrame.from_dict(mapping(f)) for f in iterable(d.get("library") or [])
            ),
            origins=origins_from(d.get("origins")),
            loader=loader_from(d.get("loader")),
            backward=_with_rest(
                backward.get("top_ops", []),
                int(number(backward.get("ops", 0))),
                float(number(backward.get("kernel_time_ms", 0.0))),
            )
            if backward
            else {},
        )
