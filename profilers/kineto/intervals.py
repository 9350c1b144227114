"""Interval arithmetic for a trace's timelines: the union of a device's activities (busy time in
any window in O(log n)), and the host's waits flattened into one cause at each moment."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from profilers.kineto.events import Ints

T = TypeVar("T")


class Union:
    """The union of intervals ``[start, end)`` as sorted disjoint runs, with the running total
    of their lengths, so the time covered inside any windows costs two searches."""

    def __init__(self, starts: Ints, ends: Ints) -> None:
        order = np.lexsort((ends, starts))
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends) if len(ends) else ends
        # NB: a run goes on while the next interval starts before everything so far has ended
        heads = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]][: len(starts)])
        self.starts, self.ends = (
            starts[heads],
            reach[np.r_[heads[1:], len(starts)][: len(heads)] - 1],
        )
        self.before = np.r_[0, np.cumsum(self.ends - self.starts)].astype(np.int64)

    def within(self, starts: Ints, ends: Ints) -> Ints:
        """The time covered inside each window ``[start, end)``."""
        if not len(self.starts):
            return np.zeros(len(starts), np.int64)

        def until(t: Ints) -> Ints:
            i = np.searchsorted(self.starts, t, "right") - 1
            j = np.maximum(i, 0)
            return np.where(
                i >= 0, self.before[j] + np.minimum(t, self.ends[j]) - self.starts[j], 0
            )

        return np.where(ends > starts, until(ends) - until(starts), 0)

    def total(self) -> int:
        return int(self.before[-1])


def segments(items: Sequence[tuple[int, int, int, T]]) -> list[tuple[int, int, T]]:
    """Possibly overlapping labelled intervals ``(start, end, rank, label)`` flattened into
    disjoint segments ``(start, end, label)`` where, at each moment, the label of highest rank
    wins (the latest started among equals)."""
    out: list[tuple[int, int, T]] = []
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    points = sorted({p for s, e, _, _ in items for p in (s, e)})
    active: list[tuple[int, int, int, int]] = []  # (-rank, -start, end, index)
    k = 0
    for here, after in zip(points, points[1:], strict=False):
        while k < len(order) and items[order[k]][0] <= here:
            s, e, rank, _ = items[order[k]]
            heapq.heappush(active, (-rank, -s, e, order[k]))
            k += 1
        while active and active[0][2] <= here:
            heapq.heappop(active)
        if not active:
            continue
        label = items[active[0][3]][3]
        if out and out[-1][1] == here and out[-1][2] is label:
            out[-1] = (out[-1][0], after, label)
        else:
            out.append((here, after, label))
    return out
