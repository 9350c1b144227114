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

from profilers.kineto.events import Call, RankTrace, Where, user_frame

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
    frame = next(filter(None, map(user_frame, call.stack.split(";"))), None) if call.stack else None
    if frame is None:
        frame = at(trace.python.get(call.tid), call.start_ns)
    if frame is None and call.tid != trace.main_tid:
        frame = at(trace.python.get(trace.main_tid), call.start_ns)
    name = op if op is not None else call.name
    return Where(name) if frame is None else Where(name, *frame)
