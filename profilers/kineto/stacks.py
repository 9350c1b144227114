"""The user's line at a moment of a host thread, from what ``with_stack=True`` recorded.

torch >= 1.10 writes each Python call as a ``python_function`` event named ``file.py(123): fn``,
nested on its thread; torch 1.8/1.9 wrote the stack into each op's ``Call stack`` argument,
innermost frame first. Either way the user's line is the innermost frame that is the user's own
code (:func:`profilers.kineto.events.user_frame`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from profilers.kineto.events import Calls, Ints, RankTrace, Where, user_frame

Frame = tuple[str, int, str]
Segments = tuple[Ints, Ints]


def flatten(intervals: Iterable[tuple[int, int, int]]) -> tuple[Ints, Ints]:
    """Nested intervals, sorted by start and longest first, as disjoint segments labelled by the
    innermost one (-1 where no interval is): their starts and labels, a segment running from its
    start to the next one's. O(n)."""
    out, stack = array("q"), list[tuple[int, int]]()
    add = out.extend  # NB: a segment each start and end, one call each (the loop is the cost)
    for start, end, label in intervals:
        while stack and stack[-1][0] <= start:
            add((stack.pop()[0], stack[-1][1] if stack else -1))
        stack.append((max(end, start), label))
        add((start, label))
    while stack:
        add((stack.pop()[0], stack[-1][1] if stack else -1))
    rows = np.frombuffer(out, np.int64).reshape(-1, 2)
    last = np.r_[rows[1:, 0] != rows[:-1, 0], True][: len(rows)]  # NB: of those at one time
    return rows[last, 0], rows[last, 1]


def _on_threads(
    out: Ints, tids: Ints, t: Ints, segments: Mapping[str, Segments], names: Sequence[str]
) -> None:
    """Where ``out`` is -1, the label of thread ``tids``'s flattened ``segments`` at ``t``."""
    for tid in np.unique(tids[out < 0]).tolist():
        if tid >= 0 and (got := segments.get(names[tid])) is not None and len(got[1]):
            on = (out < 0) & (tids == tid)
            i = np.searchsorted(got[0], t[on], "right") - 1
            out[on] = np.where(i >= 0, got[1][np.maximum(i, 0)], -1)


class Places:
    """Where calls were made and GPU activities launched, on columns, each place one
    :class:`Where` with an id: a few hundred places for a hundred thousand launches, so
    comparing and summing the pieces' places costs no objects."""

    def __init__(self, trace: RankTrace) -> None:
        self.trace, self.wheres = trace, list(trace.activities.wheres)
        self.ids = {w: i for i, w in enumerate(self.wheres)}
        self.frames = {f: i for i, f in enumerate(trace.frames)}
        self.lost: dict[int, int] = {}

    def id(self, where: Where) -> int:
        if (found := self.ids.setdefault(where, len(self.wheres))) == len(self.wheres):
            self.wheres.append(where)
        return found

    def frame(self, frame: Frame | None) -> int:
        return -1 if frame is None else self.frames.setdefault(frame, len(self.frames))

    def of(self, rows: Ints) -> Ints:
        """The place id of each activity (``rows``: rows in ``trace.activities``): where its
        launch call was made."""
        acts = self.trace.activities
        out = acts.places[rows]
        # NB: an activity with no launch in the trace is named after the first one of its
        # correlation id asked for (-1: any with none)
        for i in np.flatnonzero(out < 0).tolist():
            corr = int(acts.correlation[rows[i]])
            if corr not in self.lost:
                name = acts.names[acts.name[rows[i]]][:60]
                self.lost[corr] = self.id(Where(f"(launch not in trace: {name})"))
            out[i] = self.lost[corr]
        return out

    def where(self, calls: Ints) -> Ints:
        """The place id of each call (rows of ``Calls.table``): its name, and its user line
        when the trace has stacks: the innermost user frame of an old trace's ``Call stack``,
        else of the ``python_function`` events on the call's thread, else (a thread with no
        Python: autograd's, running backward) on the main thread: the line that called
        ``.backward()``."""
        trace, names = self.trace, self.trace.names
        if not len(calls):
            return np.zeros(0, np.int64)
        stacks, inv = np.unique(calls[:, 6], return_inverse=True)
        frames = (next(filter(None, map(user_frame, names[s].split(";"))), None) for s in stacks)
        frame = np.array([self.frame(f) for f in frames], np.int64)[inv]  # NB: Call stack: ";"
        _on_threads(frame, calls[:, 2], calls[:, 3], trace.python, names)
        if trace.main_tid in names:
            main = names.index(trace.main_tid)
            tids = np.where(calls[:, 2] != main, main, -1)
            _on_threads(frame, tids, calls[:, 3], trace.python, names)
        keys, inv = np.unique(np.stack([calls[:, 1], frame], 1), axis=0, return_inverse=True)
        got = list(self.frames)
        places = [Where(names[n], *got[f]) if f >= 0 else Where(names[n]) for n, f in keys.tolist()]
        return np.array([self.id(w) for w in places], np.int64)[inv.reshape(-1)]


def callers(calls: Ints, ops: Calls, segments: Mapping[str, Segments]) -> Ints:
    """The CPU op each runtime call was made in (rows of ``Calls.table``): by external id
    where the trace links them, else the innermost op on the call's thread at the time (the
    thread's ``segments``), else the call itself."""
    tid, start, ext = calls[:, 2], calls[:, 3], calls[:, 5]
    op = np.where(ext != 0, ops.rows_of(ext), -1)
    linked = np.flatnonzero(op >= 0)
    held = ops.at(op[linked])
    inside = (held[:, 2] == tid[linked]) & (held[:, 3] <= start[linked])
    op[linked[~(inside & (start[linked] <= held[:, 4]))]] = -1
    _on_threads(op, tid, start, segments, ops.names)
    who = calls.copy()
    who[op >= 0] = ops.at(op[op >= 0])
    return who
