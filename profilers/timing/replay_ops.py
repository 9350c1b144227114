"""The records a replay reads (:mod:`profilers.timing.replay`): one :class:`ReplayOp` per op of
a step, in the host's order, and the kinds of op (no torch: a saved report replays too)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

from profilers.timing.timeline import COMM, INPUT, SYNC

KERNEL = "kernel"
H2D = "h2d"
D2H = "d2h"
D2D = "d2d"
P2P = "p2p"
RECORD = "record"
WAIT = "wait"
HOST = "host"
COPIES = (H2D, D2H, D2D, P2P)
ENGINE_COPIES = frozenset((H2D, D2H, P2P))
"""Copies that run on a copy engine (a DMA over the bus), not on the SMs."""
KINDS = (KERNEL, *COPIES, SYNC, RECORD, WAIT, INPUT, COMM, HOST)
DEVICE = -1
"""The stream of a device-wide sync (``torch.cuda.synchronize()``)."""


@dataclass(slots=True, eq=False, repr=False)
class ReplayOp:
    """One recorded op of a step, in the host's order.

    Attributes:
        kind: one of :data:`KINDS`.
        line: the line that ran it (``file:line``).
        host_ns: host time before the op is queued: the Python since the previous op, dispatch
            and the launch itself (the profiler's own time included, see ``overhead_ns``).
        overhead_ns: the part of ``host_ns`` that was the profiler's own (dropped when the step
            is replayed unprofiled).
        stream: the stream it runs on (:data:`DEVICE` for a device-wide :data:`SYNC`).
        gpu_ns: its time on the GPU (measured with CUDA events, or from the GPU model).
        nbytes: bytes a copy moves.
        pinned: a copy's host memory is pinned (page-locked).
        non_blocking: the copy was asked with ``non_blocking=True``.
        sync: the sync cause (``item``, ``copy_to_host``, ``synchronize``...) when the op blocks
            the host until it is done, else None.
        event: the event a :data:`RECORD`, :data:`WAIT` or event :data:`SYNC` is about (-1:
            none).
        wait_ns: how long an :data:`INPUT` or :data:`COMM` op blocked the host.
        dtype: a copy's element type (``float32``...), for the what-ifs that change it.
        every: the op runs in one step of ``every`` only (the last of each group of
            ``every`` chained steps; 1: every step): a value read once per N steps.
    """

    kind: str
    line: str
    host_ns: int = 0
    _: KW_ONLY
    stream: int = 0
    gpu_ns: int = 0
    nbytes: int = 0
    pinned: bool = False
    non_blocking: bool = False
    sync: str | None = None
    event: int = -1
    wait_ns: int = 0
    overhead_ns: int = 0
    dtype: str | None = None
    every: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown op kind {self.kind!r} (one of {', '.join(KINDS)})")

    def changed(self, **fields: Any) -> ReplayOp:
        """A copy of this op with ``fields`` replaced (the what-ifs never change a recording)."""
        out = ReplayOp.__new__(ReplayOp)
        for name in ReplayOp.__slots__:
            setattr(out, name, fields.pop(name, getattr(self, name)))
        if fields:
            raise TypeError(f"ReplayOp has no field(s) {', '.join(sorted(fields))}")
        return out

    @property
    def blocks_host(self) -> bool:
        """The host waits for this op to finish on the GPU."""
        if self.sync is not None:
            return True
        return self.kind in ENGINE_COPIES and not (self.pinned and self.non_blocking)

    def __repr__(self) -> str:
        return (
            f"ReplayOp({self.kind!r}, {self.line!r}, host_ns={self.host_ns}, gpu_ns={self.gpu_ns})"
        )
