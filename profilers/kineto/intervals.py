"""Interval arithmetic for a trace's timelines: the union of a device's activities (busy time in
any window in O(log n)), and the host's waits flattened into one cause at each moment."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Union:
    """The union of intervals ``[start, end)`` as sorted disjoint runs, with the running total
    of their lengths, so the time covered inside any window costs two bisections."""

    def __init__(self, intervals: Iterable[tuple[int, int]]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in sorted(intervals):
            if self.ends and start <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], end)
            else:
                self.starts.append(start)
                self.ends.append(end)
        self.before: list[int] = [0]
        for start, end in zip(self.starts, self.ends, strict=True):
            self.before.append(self.before[-1] + end - start)

    def covered_until(self, t: int) -> int:
        """The time covered before ``t``."""
        i = bisect_right(self.starts, t) - 1
        return self.before[i] + min(t, self.ends[i]) - self.starts[i] if i >= 0 else 0

    def within(self, start: int, end: int) -> int:
        """The time covered inside ``[start, end)``."""
        return self.covered_until(end) - self.covered_until(start) if end > start else 0

    def total(self) -> int:
        return self.before[-1]


class Segments(Generic[T]):
    """Possibly overlapping labelled intervals flattened into disjoint segments where, at each
    moment, the label of highest rank wins (the latest started among equals)."""

    def __init__(self, items: Sequence[tuple[int, int, int, T]]) -> None:
        """``items``: ``(start, end, rank, label)``."""
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.labels: list[T] = []
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
            if self.ends and self.ends[-1] == here and self.labels[-1] is label:
                self.ends[-1] = after
            else:
                self.starts.append(here)
                self.ends.append(after)
                self.labels.append(label)

    def at(self, t: int) -> T | None:
        """The label at ``t`` (segments are closed at both ends here: a wait that ends exactly
        when the GPU runs dry still holds the host at that moment)."""
        i = bisect_right(self.starts, t) - 1
        return self.labels[i] if i >= 0 and t <= self.ends[i] else None

    def overlapping(self, start: int, end: int) -> Iterable[tuple[int, int, T]]:
        """The segments' parts inside ``[start, end)``, in order."""
        i = max(0, bisect_right(self.starts, start) - 1)
        while i < len(self.starts) and self.starts[i] < end:
            s, e = max(start, self.starts[i]), min(end, self.ends[i])
            if e > s:
                yield s, e, self.labels[i]
            i += 1
