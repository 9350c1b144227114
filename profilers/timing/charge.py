"""The hot path's helpers for the step clock: an op's time moved to the wait it made (a sync, a
blocking copy), a collective, a counted op on the fast path (profilers/timing/timeline.py has
the records and the rules they keep)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from profilers.timing.gaps import LONG_GAP_NS
from profilers.timing.timeline import COPY, LAUNCH, SYNC, StepClock

if TYPE_CHECKING:
    from profilers.counting.ops import Transfer  # noqa: TID251 (types only)
    from profilers.timing.cuda_events import TimedOp

HOST_READS = frozenset(("item", "copy_to_host"))
"""Sync causes that read a value back to the host."""

_HOST_BLOCKING_WAYS = frozenset(("h2d", "d2h", "p2p"))


def charge_transfer(
    clock: StepClock,
    line: object,
    found: Transfer | list[Transfer],
    op_ns: int,
    start_ns: int,
    timed: TimedOp | None = None,
) -> None:
    """The op just run at ``line`` (``op_ns`` from ``start_ns``, already charged as launch)
    made the transfer(s) ``found``: a sync moves its time to ``sync`` (by cause), a copy that
    blocks the host (pageable, or not ``non_blocking``) to ``copy``; the counts a CUDA graph
    capture cares about are noted either way. NB: a copy within one GPU (d2d) never blocks the
    host, whatever its ``non_blocking`` says.

    ``timed``: the op's CUDA timing record. A host read's sync is the last thing it does
    (``.item()`` and a copy to the host copy, then wait for their stream), so its end event is
    recorded on an empty stream when the op returns: an anchor (profilers/timing/gpu_time.py)."""
    rec = clock.line(line)
    moved = False
    for t in found if isinstance(found, list) else (found,):
        if t.pageable:
            rec.pageable += 1
        if t.sync is not None:
            rec.syncs += 1
            if t.sync in HOST_READS:
                rec.host_reads += 1
                if timed is not None:
                    timed.anchor_ns = start_ns + op_ns
            kind, cause = SYNC, t.sync
        elif t.direction in _HOST_BLOCKING_WAYS and (t.pageable or not t.non_blocking):
            kind, cause = COPY, None
        else:
            continue
        if not moved:  # the op's time goes with its first wait
            clock.moved(line, kind, cause, op_ns, start_ns)
            moved = True


def untimed(clock: StepClock, own_ns: int, now_ns: int) -> None:
    """A call the fast path took and did not count (a cast of a Python number, a copy within a
    device, the calls ops make inside themselves): its time in our kernel (``own_ns``) and the
    calibrated cost around it (``clock.outside_ns``: the dispatcher boxing it into Python and
    back) are the profiler's own, taken out of the gap they fell in (at most all of it).

    NB: counted in ``untimed_ns`` too: the gap's start moves on here, so the gaps and the
    stack sampler's readings are placed on the script's time, the wall clock less that total
    (:meth:`StepClock.long_gap`); on the wall clock a gap whose end was mostly our time (a
    loop of ``y + 1``) was named by the readings of its last stretch only."""
    shift = min(own_ns + clock.outside_ns, now_ns - clock.last_ns)
    if shift > 0:
        clock.last_ns += shift
        clock.own_ns += shift
        clock.untimed_ns += shift


def settle_op(
    clock: StepClock, line: object, t_in: int, t_call: int, t_ret: int, kind: str
) -> None:
    """An op the hot path ran outside its common path (a collective): launch before it, the
    op's own time as ``kind``, the hot path's own time apart."""
    rec = clock.line(line)
    rec.launch_ns += t_in - clock.last_ns - clock.outside_ns
    if t_in - clock.last_ns >= LONG_GAP_NS:
        clock.long_gap(t_in, line)
    clock.charge(rec, kind, None, t_ret - t_call)
    clock.note_wait(kind, None, line, t_call, t_ret)
    t_out = time.perf_counter_ns()
    if clock.replay is not None:
        clock.replay.wait(kind, None, line, t_in, t_call, t_ret, t_out)
    clock.own_ns += t_call - t_in + t_out - t_ret + clock.outside_ns
    clock.ops += 1
    clock.last_ns = t_out
    clock.last_line = line


def timed_on_fast_path(
    clock: StepClock,
    line: object,
    found: Transfer | list[Transfer],
    enter_ns: int,
    start_ns: int,
    end_ns: int,
    exit_ns: int | None = None,
) -> None:
    """A counted op on the fast path (profilers/counting/kernels.py), which ran from ``start_ns`` to
    ``end_ns`` inside its kernel (entered at ``enter_ns``): the host work before it (no line:
    the ops between counted ones never reach Python there) and its own run as launch, then,
    when it made the host wait, its time moved to that wait's cause, as on the dispatch mode."""
    leave = time.perf_counter_ns() if exit_ns is None else exit_ns
    untimed(clock, 0, enter_ns)  # NB: the cost around the kernel, before the gap is charged
    clock.wait(line, LAUNCH, None, enter_ns, start_ns, end_ns, leave)
    charge_transfer(clock, line, found, end_ns - start_ns, start_ns)
