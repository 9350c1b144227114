"""The user's line at a moment of a host thread, from what ``with_stack=True`` recorded.

torch >= 1.10 writes each Python call as a ``python_function`` event named ``file.py(123): fn``,
nested on its thread; torch 1.8/1.9 wrote the stack into each op's ``Call stack`` argument,
innermost frame first. Either way the user's line is the innermost frame that is the user's own
code (:func:`profilers.kineto.events.user_frame`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, MutableSequence, Sequence
from typing import TypeVar

import numpy as np

from profilers.kineto.events import Call, Ints, RankTrace, Where, user_frame

Frame = tuple[str, int, str]
T = TypeVar("T")


def flatten(
    intervals: Iterable[tuple[int, int, T]],
    none: T,
    starts: MutableSequence[int],
    labels: MutableSequence[T],
) -> tuple[MutableSequence[int], MutableSequence[T]]:
    """Nested intervals, sorted by start and longest first, as disjoint segments labelled by the
    innermost one (``none`` where no interval is), appended to ``starts`` and ``labels``: a
    segment runs from its start to the next one's. O(n)."""

    def emit(t: int, label: T) -> None:
        if starts and starts[-1] == t:
            labels[-1] = label
        else:
            starts.append(t)
            labels.append(label)

    stack: list[tuple[int, T]] = []
    for start, end, frame in intervals:
        while stack and stack[-1][0] <= start:
            ended = stack.pop()[0]
            emit(ended, stack[-1][1] if stack else none)
        stack.append((max(end, start), frame))
        emit(start, frame)
    while stack:
        ended = stack.pop()[0]
        emit(ended, stack[-1][1] if stack else none)
    return starts, labels


def at(segments: tuple[Sequence[int], Sequence[T]] | None, t_ns: int) -> T | None:
    """The label of flattened ``segments`` at ``t_ns``."""
    if segments is None:
        return None
    starts, labels = segments
    i = bisect_right(starts, t_ns) - 1
    return labels[i] if i >= 0 else None


def op_of(trace: RankTrace, call: Call) -> Call | None:
    """The CPU op a runtime call was made in: by external id where the trace links them, else
    the innermost op running on the call's thread at the time."""
    op = trace.ops.get(call.ext_id) if call.ext_id else None
    if op is not None and op.tid == call.tid and op.start_ns <= call.start_ns <= op.end_ns:
        return op
    row = at(trace.op_segments.get(call.tid), call.start_ns)
    return None if row is None or row < 0 else trace.ops.call(row)


def where_of(trace: RankTrace, call: Call, op: str | None = None) -> Where:
    """Where ``call`` was made: its user line when the trace has stacks, and ``op`` (its CPU
    op's name by default). The line is the innermost user frame of an old trace's ``Call
    stack``, else of the ``python_function`` events on the call's thread, else (a thread with no
    Python: autograd's, running backward) on the main thread: the line that called
    ``.backward()``."""
    frame = _stack_frame(call.stack)
    if frame is None:
        frame = at(trace.python.get(call.tid), call.start_ns)
    if frame is None and call.tid != trace.main_tid:
        frame = at(trace.python.get(trace.main_tid), call.start_ns)
    name = op if op is not None else call.name
    return Where(name) if frame is None else Where(name, *frame)


def _at(starts: Ints, labels: Ints, t: Ints) -> Ints:
    """:func:`at` for each ``t`` (-1 where no segment has begun)."""
    if not len(labels):
        return np.full(len(t), -1, np.int64)
    i = np.searchsorted(starts, t, "right") - 1
    return np.where(i >= 0, labels[np.maximum(i, 0)], -1)


class Places:
    """Where GPU activities were launched (:func:`op_of` then :func:`where_of` of their launch
    call, on columns), each place one :class:`Where` with an id: a few hundred places for a
    hundred thousand launches, so comparing and summing the pieces' places costs no objects."""

    def __init__(self, trace: RankTrace) -> None:
        self.trace, self.ids, self.wheres = trace, dict[Where, int](), list[Where]()
        self.frames: dict[Frame, int] = {}
        self.threads: dict[int, tuple[Ints, Ints] | None] = {}
        self.lost: dict[int, int] = {}

    def id(self, where: Where) -> int:
        if (found := self.ids.setdefault(where, len(self.wheres))) == len(self.wheres):
            self.wheres.append(where)
        return found

    def frame(self, frame: Frame | None) -> int:
        return -1 if frame is None else self.frames.setdefault(frame, len(self.frames))

    def _python(self, tid: int) -> tuple[Ints, Ints] | None:
        """The thread's user frames over time: segment starts and frame ids."""
        if tid not in self.threads:
            got = self.trace.python.get(self.trace.ops.names[tid])
            self.threads[tid] = (
                None
                if got is None
                else (
                    np.asarray(got[0], np.int64),
                    np.array([self.frame(f) for f in got[1]], np.int64),
                )
            )
        return self.threads[tid]

    def _frames_at(self, frame: Ints, tids: Ints, t: Ints) -> None:
        """Where ``frame`` has none, the user's frame on thread ``tids`` at ``t``."""
        for tid in np.unique(tids[frame < 0]).tolist():
            if tid >= 0 and (segments := self._python(tid)) is not None:
                at_tid = (frame < 0) & (tids == tid)
                frame[at_tid] = _at(*segments, t[at_tid])

    def of(self, rows: Ints) -> Ints:
        """The place id of each activity (``rows``: rows in ``trace.activities``)."""
        trace, acts = self.trace, self.trace.activities
        launch = trace.launches.rows_of(acts.correlation[rows])
        out, lost = np.empty(len(rows), np.int64), launch < 0
        # NB: an activity with no launch in the trace is named after the first one of its
        # correlation id asked for (-1: any with none)
        for i in np.flatnonzero(lost).tolist():
            corr = int(acts.correlation[rows[i]])
            if corr not in self.lost:
                name = acts.names[acts.name[rows[i]]][:60]
                self.lost[corr] = self.id(Where(f"(launch not in trace: {name})"))
            out[i] = self.lost[corr]
        if lost.all():
            return out
        calls = trace.launches.table[launch[~lost]]
        tid, start, ext = calls[:, 2], calls[:, 3], calls[:, 5]
        op = np.where(ext != 0, trace.ops.rows_of(ext), -1)
        linked = np.flatnonzero(op >= 0)
        held = trace.ops.table[op[linked]]
        inside = (held[:, 2] == tid[linked]) & (held[:, 3] <= start[linked])
        op[linked[~(inside & (start[linked] <= held[:, 4]))]] = -1
        for t in np.unique(tid[op < 0]).tolist():  # else the innermost op on the call's thread
            if (segments := trace.op_segments.get(trace.ops.names[t])) is not None:
                on_t = (op < 0) & (tid == t)
                op[on_t] = _at(np.asarray(segments[0]), np.asarray(segments[1]), start[on_t])
        who = calls.copy()  # the op, else the launch call itself
        who[op >= 0] = trace.ops.table[op[op >= 0]]
        stacks, inv = np.unique(who[:, 6], return_inverse=True)
        frame = np.array([self.frame(_stack_frame(trace.ops.names[s])) for s in stacks.tolist()])
        frame = frame.astype(np.int64)[inv]
        self._frames_at(frame, who[:, 2], who[:, 3])
        if (main := trace.ops.ids.get(trace.main_tid)) is not None:
            self._frames_at(frame, np.where(who[:, 2] != main, main, -1), who[:, 3])
        keys, inv = np.unique(np.stack([who[:, 1], frame], 1), axis=0, return_inverse=True)
        frames = list(self.frames)
        places = [
            Where(trace.ops.names[n]) if f < 0 else Where(trace.ops.names[n], *frames[f])
            for n, f in keys.tolist()
        ]
        out[~lost] = np.array([self.id(w) for w in places], np.int64)[inv.reshape(-1)]
        return out


def _stack_frame(stack: str) -> Frame | None:
    """The innermost user frame of an old trace's ``Call stack``."""
    return next(filter(None, map(user_frame, stack.split(";"))), None) if stack else None
