"""A replay of one step: the host and each stream simulated from what a run recorded.

The step is a list of :class:`ReplayOp` in the host's program order. One pass queues them:

* the host does ``host_ns`` of work (Python, dispatch, the launch itself) before each op;
* an op runs on its stream after the stream's previous op, and never before the host queued it;
* a copy between host and device (``h2d``, ``d2h``) or between GPUs (``p2p``) also waits for its
  copy engine (one per direction: copies in one direction go one after the other, whatever
  their streams); a kernel or a ``d2d`` copy runs on the SMs, concurrently with other streams;
* a copy from pageable memory, or without ``non_blocking``, blocks the host until it is done;
  NB: a ``d2d`` copy never does (CUDA queues it like a kernel), as the profiler counts it;
* an op with a ``sync`` cause (``.item()`` is a ``d2h`` copy with cause ``item``; ``nonzero``
  a kernel with ``data_dependent_shape``) blocks the host until the op is done; a
  :data:`SYNC` op blocks it until its stream drains (all streams: :data:`DEVICE`; an event:
  ``event``);
* :data:`RECORD` marks an event on a stream (done when the stream gets there); :data:`WAIT`
  holds a stream until that event is done: events order work across streams;
* a :data:`HOST` op is host work only (what a what-if leaves of an op it takes off the GPU);
* :data:`INPUT` and :data:`COMM` ops block the host for ``wait_ns`` (in a loader's
  ``__next__``, in a collective), a :data:`COMM` op may also run ``gpu_ns`` on its stream.

A step runs from idle streams until the host is done and the GPU has drained: its wall time is
``max(host end, GPU end)``. Chained steps (``steps=N``) start where the previous one left off,
so work a step leaves queued overlaps the next one's host time.

NB: one pass suffices: when the host queues an op, everything the op waits for (its stream's
previous op, its engine, an event) was queued before it, so its start is known then; the host
waits only on work already queued. The cost is linear in the ops (benchmarks/bench_replay.py).

Idle time is charged as :mod:`profilers.timing.idle` charges a measured step (same rule, same
causes and lines), in one linear pass over the replayed intervals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from profilers.timing.idle import END_OF_STEP, overlap_ns
from profilers.timing.replay_ops import (
    COPIES,
    D2D,
    D2H,
    DEVICE,
    ENGINE_COPIES,
    H2D,
    HOST,
    KERNEL,
    KINDS,
    P2P,
    RECORD,
    WAIT,
    ReplayOp,
)
from profilers.timing.timeline import COMM, COPY, INPUT, LAUNCH, SYNC, WAITS


@dataclass(slots=True, eq=False)
class ReplayResult:
    """What a replay found, summed over its ``steps`` (``per_step`` divides).

    Attributes:
        steps: steps replayed (chained).
        wall_ns: from the first op's host work until the host is done and the GPU has drained.
        host_end_ns: when the host was done.
        busy_ns: the union of every op's interval on the GPU.
        idle_ns: ``wall_ns - busy_ns``.
        idle_by_cause: idle ns by cause (``input``, ``sync``, ``copy``, ``comm``, ``launch``).
        idle_by_line: ``(cause, line, sync cause or None)`` -> idle ns.
        host_by_cause: the host's own time by cause (waits, and ``launch`` for the rest).
        spans: each op's ``(start_ns, end_ns, stream, line)`` on the GPU, in queue order.
    """

    steps: int
    wall_ns: int
    host_end_ns: int
    busy_ns: int
    idle_by_cause: dict[str, int]
    idle_by_line: dict[tuple[str, str, str | None], int]
    host_by_cause: dict[str, int]
    spans: list[tuple[int, int, int, str]]
    idle_ns: int = field(init=False)

    def __post_init__(self) -> None:
        self.idle_ns = self.wall_ns - self.busy_ns

    @property
    def step_ns(self) -> float:
        """The wall time of one step (the mean over the chained steps)."""
        return self.wall_ns / self.steps

    def per_step(self, ns: int) -> float:
        return ns / self.steps

    def to_dict(self, measured: str = "replayed") -> dict[str, Any]:
        """Per step, in the shape of :func:`profilers.timing.idle.charge`'s answer (ms), with
        ``measured`` saying where the figures come from (``replayed``, ``predicted``)."""
        n = self.steps
        lines = sorted(self.idle_by_line.items(), key=lambda kv: kv[1], reverse=True)
        return {
            "measured": measured,
            "wall_ms": self.wall_ns / n / 1e6,
            "busy_ms": self.busy_ns / n / 1e6,
            "idle_total_ms": self.idle_ns / n / 1e6,
            "idle_ms": {k: v / n / 1e6 for k, v in self.idle_by_cause.items()},
            "idle_lines": [
                {"site": line, "cause": kind, "sync_cause": cause, "ms": ns / n / 1e6}
                for (kind, line, cause), ns in lines
            ],
        }


Wait = tuple[int, int, str, str | None, str]
"""A host wait: ``(start_ns, end_ns, kind, sync cause, line)``."""


def replay(  # noqa: C901 - the replay loop inlined: a call per op would cost a third
    ops: list[ReplayOp], *, steps: int = 1, drop_overhead: bool = False
) -> ReplayResult:
    """Replays ``ops`` (one step, in the host's order) ``steps`` times back to back.

    Args:
        ops: the step's ops.
        steps: steps chained (an op with ``every=N`` runs in every N-th of them).
        drop_overhead: take each op's ``overhead_ns`` out of its host time: the step as an
            unprofiled run would take it.
    """
    if steps < 1:
        raise ValueError("steps must be at least 1")
    t = 0
    tails: dict[int, int] = {}
    engines: dict[str, int] = {}
    events: dict[int, int] = {}
    spans: list[tuple[int, int, int, str]] = []
    waits: list[Wait] = []
    gpu_end = 0
    grouped = any(op.every > 1 for op in ops)
    for step in range(steps):
        for op in ops:
            if grouped and op.every > 1 and (step + 1) % op.every:
                continue
            t += op.host_ns - op.overhead_ns if drop_overhead else op.host_ns
            kind = op.kind
            s = op.stream
            # NB: the common case (a kernel, a copy) inline: a call per op would cost a third.
            if kind == KERNEL or kind in COPIES:
                start = tails.get(s, 0)
                if t > start:
                    start = t
                engine = kind in ENGINE_COPIES
                if engine:
                    free = engines.get(kind, 0)
                    if free > start:
                        start = free
                end = start + op.gpu_ns
                tails[s] = end
                if engine:
                    engines[kind] = end
                if end > start:
                    spans.append((start, end, s, op.line))
                    if end > gpu_end:
                        gpu_end = end
                if end > t and (
                    op.sync is not None or (engine and not (op.pinned and op.non_blocking))
                ):
                    waits.append((t, end, SYNC if op.sync is not None else COPY, op.sync, op.line))
                    t = end
            elif kind == HOST:
                continue
            elif kind == RECORD:
                tail = tails.get(s, 0)
                events[op.event] = tail if tail > t else t
            elif kind == WAIT:
                done = events.get(op.event, 0)
                if done > tails.get(s, 0):
                    tails[s] = done
            elif kind == SYNC:
                if op.event >= 0:
                    until = events.get(op.event, 0)
                elif s == DEVICE:
                    until = max(tails.values(), default=0)
                else:
                    until = tails.get(s, 0)
                if until > t:
                    waits.append((t, until, SYNC, op.sync, op.line))
                    t = until
            else:  # INPUT, COMM: the host waits; a collective may run on its stream too
                if op.gpu_ns:
                    start = max(t, tails.get(s, 0))
                    tails[s] = end = start + op.gpu_ns
                    spans.append((start, end, s, op.line))
                    gpu_end = max(gpu_end, end)
                if op.wait_ns:
                    waits.append((t, t + op.wait_ns, kind, None, op.line))
                    t += op.wait_ns
    wall = max(t, gpu_end)
    busy, idle_by_cause, idle_by_line = _charge(wall, spans, waits)
    host = dict.fromkeys((*WAITS, LAUNCH), 0)
    for a, b, kind, _cause, _line in waits:
        host[kind] += b - a
    host[LAUNCH] = t - sum(host[k] for k in WAITS)
    return ReplayResult(steps, wall, t, busy, idle_by_cause, idle_by_line, host, spans)


def _charge(
    wall: int, spans: list[tuple[int, int, int, str]], waits: list[Wait]
) -> tuple[int, dict[str, int], dict[tuple[str, str, str | None], int]]:
    """Busy ns, and the idle ns of ``[0, wall)`` by cause and by line, by the rule of
    :func:`profilers.timing.idle.charge` (slack 0). Each stream's spans are in start order
    (a stream runs its ops in order), and so are the host's waits (the host runs one at a time),
    so one merge and one walk do it."""
    ordered = sorted(spans)  # NB: runs of one stream are sorted already: timsort merges them
    totals = dict.fromkeys((*WAITS, LAUNCH), 0)
    by_line: dict[tuple[str, str, str | None], int] = {}
    busy = 0
    t = 0  # the end of the busy time so far
    first = 0  # the first wait that may overlap the next gap
    nw = len(waits)

    work: list[tuple[int, int]] = []  # the union of the spans: what a wait can wait for
    for a, b, _s, _l in ordered:
        if work and a <= work[-1][1]:
            if b > work[-1][1]:
                work[-1] = (work[-1][0], b)
        else:
            work.append((a, b))

    def gap(a: int, b: int, next_line: str) -> None:
        nonlocal first
        while first < nw and waits[first][1] < a:
            first += 1
        cur = a
        refill: Wait | None = None
        left = 0
        i = first
        while i < nw and waits[i][0] < b:
            w = waits[i]
            s = w[0] if w[0] > a else a
            e = w[1] if w[1] < b else b
            if s > cur:  # host Python before this wait
                left -= _add(totals, by_line, refill, left, next_line, s - cur)
            lo = s if s > cur else cur
            if e > lo:
                totals[w[2]] += e - lo
                key = (w[2], w[4], w[3])
                by_line[key] = by_line.get(key, 0) + e - lo
            if e > cur:
                cur = e
            refill, left = w, overlap_ns(work, w[0], w[1])
            i += 1
        if b > cur:
            _add(totals, by_line, refill, left, next_line, b - cur)

    for a, b, _stream, line in ordered:
        if a > t:
            gap(t, a, line)
        if b > t:
            busy += b - (a if a > t else t)
            t = b
    if wall > t:
        gap(t, wall, END_OF_STEP)
    return busy, totals, by_line


def _add(
    totals: dict[str, int],
    by_line: dict[tuple[str, str, str | None], int],
    refill: Wait | None,
    left: int,
    next_line: str,
    ns: int,
) -> int:
    """Host Python inside an idle gap: the refill after a wait goes to that wait up to ``left``
    (the GPU work the wait waited for, not yet charged), the rest is launch time at the line of
    the op that ends the gap. Returns what went to the wait."""
    own = min(ns, left) if refill is not None else 0
    if own > 0:
        assert refill is not None
        key: tuple[str, str, str | None] = (refill[2], refill[4], refill[3])
        totals[key[0]] += own
        by_line[key] = by_line.get(key, 0) + own
    if ns > own:
        launch = (LAUNCH, next_line, None)
        totals[LAUNCH] += ns - own
        by_line[launch] = by_line.get(launch, 0) + ns - own
    return max(own, 0)


__all__ = [
    "COMM",
    "COPIES",
    "D2D",
    "D2H",
    "DEVICE",
    "H2D",
    "HOST",
    "INPUT",
    "KERNEL",
    "KINDS",
    "P2P",
    "RECORD",
    "SYNC",
    "WAIT",
    "ReplayOp",
    "ReplayResult",
    "replay",
]
