"""The tables a trace's activities sum to: the top kernels, the copies by direction, host memory
and line, and HTA's two views of the same activities (its temporal breakdown's window and its
per-stream idle time breakdown), on HTA's definitions so that its figures can be compared."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from profilers.kineto.events import KERNEL, KINDS, MEMCPY, NO_CALL, Activities, Ints, RankTrace
from profilers.kineto.intervals import Union
from profilers.kineto.result import ActiveWindow, CopyStat, KernelStat, StreamIdle, ms
from profilers.kineto.stacks import Places

#: HTA's default ``consecutive_kernel_delay`` (30, in the trace's microseconds).
KERNEL_WAIT_NS = 30_000
KERNELS_TOP = 30
COPY_LINES_TOP = 20


def kernel_table(acts: Activities, rows: Ints) -> tuple[KernelStat, ...]:
    """The kernels among ``rows`` by device and name, the most GPU time first (ties: the first
    to come)."""
    rows = rows[acts.kind[rows] == KINDS.index(KERNEL)]
    key = np.stack([acts.device[rows], acts.name[rows]], 1)
    groups, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv, took = inv.reshape(-1), acts.end[rows] - acts.start[rows]
    count, total = np.bincount(inv), np.bincount(inv, weights=took).astype(np.int64)
    longest = np.zeros(len(groups), np.int64)
    np.maximum.at(longest, inv, took)
    ranked = np.lexsort((first, -total))[:KERNELS_TOP].tolist()
    cols = (col[ranked].tolist() for col in (groups, count, total, longest))
    return tuple(
        KernelStat(acts.names[n], d, c, ms(t), ms(m)) for (d, n), c, t, m in zip(*cols, strict=True)
    )


def copy_tables(trace: RankTrace, rows: Ints, places: Places) -> tuple[tuple[CopyStat, ...], ...]:
    acts = trace.activities
    rows = rows[acts.kind[rows] == KINDS.index(MEMCPY)]
    kinds: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    lines: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    took = (acts.end[rows] - acts.start[rows]).tolist()
    for name, nbytes, ns, place in zip(
        acts.name[rows].tolist(), acts.bytes[rows].tolist(), took, places.of(rows).tolist(),
        strict=True
    ):  # fmt: skip
        direction, memory = acts.copy_kinds[name]
        for s in (kinds[(direction, memory)], lines[(direction, memory, place)]):
            s[0] += 1
            s[1] += nbytes
            s[2] += ns
    by_kind = tuple(
        CopyStat(d, m, c, b, ms(t)) for (d, m), (c, b, t) in sorted(kinds.items(), key=str)
    )
    ranked = sorted(lines.items(), key=lambda kv: (kv[1][1], kv[1][0]), reverse=True)
    by_line = tuple(
        CopyStat(d, m, c, b, ms(t), places.wheres[w]) for (d, m, w), (c, b, t) in ranked
    )
    return by_kind, by_line[:COPY_LINES_TOP]


def hta_views(
    by_device: dict[int, Ints], trace: RankTrace
) -> tuple[tuple[ActiveWindow, ...], tuple[StreamIdle, ...], tuple[int, int]]:
    """The figures HTA's temporal breakdown and idle time breakdown give, on their definitions
    (``DEFINITIONS["active_window"]``, ``["stream_idle"]``), to compare with; and the count and
    GPU time (ns) of the activities HTA leaves out (``by_device``: each device's activities,
    sorted by start)."""
    base, acts = trace.span_ns[0], trace.activities
    active, streams = [], []
    left_out = [0, 0]
    launched = acts.launched
    for device, every in sorted(by_device.items()):
        # NB: in a trace of two or more steps, HTA analyses only the activities whose launch
        # call is in the trace (it drops the rest as work of iterations it did not trace, though
        # a GPU that lags its host runs them inside the first traced step); with fewer, all
        rows = every if len(trace.steps) < 2 else every[launched[every] != NO_CALL]
        took = acts.end - acts.start
        left_out[0] += len(every) - len(rows)
        left_out[1] += int(took[every].sum() - took[rows].sum())
        if not len(rows):
            continue
        s, e = acts.start[rows], acts.end[rows]
        compute = (acts.kind[rows] == KINDS.index(KERNEL)) & ~acts.nccl[rows]
        busy, first, last = Union(s, e), int(s.min()), int(e.max())
        computing = Union(s[compute], e[compute]).total()
        active.append(
            ActiveWindow(
                device,
                ms(first - base),
                ms(last - base),
                ms(busy.total()),
                ms(computing),
                ms(last - first - busy.total()),
            )
        )
        for stream in np.unique(acts.stream[rows]).tolist():
            run = rows[acts.stream[rows] == stream]
            gap = acts.start[run[1:]] - acts.end[run[:-1]]
            host = launched[run[1:]] > acts.end[run[:-1]]
            kind = np.where(host, 0, np.where(gap < KERNEL_WAIT_NS, 1, 2))
            waits = np.bincount(kind, weights=gap, minlength=3).astype(np.int64).tolist()
            streams.append(StreamIdle(device, stream, *(ms(w) for w in waits)))
    return tuple(active), tuple(streams), (left_out[0], left_out[1])
