"""The tables a trace's activities sum to: the top kernels, the copies by direction, host memory
and line, and HTA's two views of the same activities (its temporal breakdown's window and its
per-stream idle time breakdown), on HTA's definitions so that its figures can be compared."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from profilers.kineto.events import KERNEL, MEMCPY, Activity, RankTrace, Where
from profilers.kineto.intervals import Union
from profilers.kineto.result import ActiveWindow, CopyStat, KernelStat, StreamIdle, ms

#: HTA's default ``consecutive_kernel_delay`` (30, in the trace's microseconds).
KERNEL_WAIT_NS = 30_000
KERNELS_TOP = 30
COPY_LINES_TOP = 20


def kernel_table(acts: Sequence[Activity]) -> tuple[KernelStat, ...]:
    stats: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for a in acts:
        if a.kind == KERNEL:
            s = stats[(a.device, a.name)]
            d = a.end_ns - a.start_ns
            s[0] += 1
            s[1] += d
            s[2] = max(s[2], d)
    ranked = sorted(stats.items(), key=lambda kv: kv[1][1], reverse=True)[:KERNELS_TOP]
    return tuple(KernelStat(n, dev, c, ms(t), ms(m)) for (dev, n), (c, t, m) in ranked)


def copy_tables(
    acts: Sequence[Activity], place: Callable[[Activity], Where]
) -> tuple[tuple[CopyStat, ...], ...]:
    kinds: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    lines: dict[tuple[str, str, Where], list[int]] = defaultdict(lambda: [0, 0, 0])
    for a in acts:
        if a.kind != MEMCPY:
            continue
        for s in (kinds[(a.direction, a.memory)], lines[(a.direction, a.memory, place(a))]):
            s[0] += 1
            s[1] += a.bytes
            s[2] += a.end_ns - a.start_ns
    by_kind = tuple(
        CopyStat(d, m, c, b, ms(t)) for (d, m), (c, b, t) in sorted(kinds.items(), key=str)
    )
    ranked = sorted(lines.items(), key=lambda kv: (kv[1][1], kv[1][0]), reverse=True)
    by_line = tuple(CopyStat(d, m, c, b, ms(t), w) for (d, m, w), (c, b, t) in ranked)
    return by_kind, by_line[:COPY_LINES_TOP]


def hta_views(
    by_device: dict[int, list[Activity]], trace: RankTrace
) -> tuple[tuple[ActiveWindow, ...], tuple[StreamIdle, ...], tuple[int, int]]:
    """The figures HTA's temporal breakdown and idle time breakdown give, on their definitions
    (``DEFINITIONS["active_window"]``, ``["stream_idle"]``), to compare with; and the count and
    GPU time (ns) of the activities HTA leaves out."""
    base = trace.span_ns[0]
    active, streams = [], []
    left_out = [0, 0]
    for device, every in sorted(by_device.items()):
        # NB: in a trace of two or more steps, HTA analyses only the activities whose launch
        # call is in the trace (it drops the rest as work of iterations it did not trace, though
        # a GPU that lags its host runs them inside the first traced step); with fewer, all
        acts = (
            every if len(trace.steps) < 2 else [a for a in every if a.correlation in trace.launches]
        )
        left_out[0] += len(every) - len(acts)
        left_out[1] += sum(a.end_ns - a.start_ns for a in every) - sum(
            a.end_ns - a.start_ns for a in acts
        )
        if not acts:
            continue
        busy = Union((a.start_ns, a.end_ns) for a in acts)
        compute = Union((a.start_ns, a.end_ns) for a in acts if a.kind == KERNEL and not a.nccl)
        first, last = busy.starts[0], busy.ends[-1]
        active.append(
            ActiveWindow(
                device,
                ms(first - base),
                ms(last - base),
                ms(busy.total()),
                ms(compute.total()),
                ms(last - first - busy.total()),
            )
        )
        per_stream: dict[int, list[Activity]] = defaultdict(list)
        for a in acts:
            per_stream[a.stream].append(a)
        for stream, run in sorted(per_stream.items()):
            waits = [0, 0, 0]
            for prev, a in zip(run, run[1:], strict=False):
                gap = a.start_ns - prev.end_ns
                call = trace.launches.start(a.correlation)
                kind = (
                    0
                    if call is not None and call > prev.end_ns
                    else (1 if gap < KERNEL_WAIT_NS else 2)
                )
                waits[kind] += gap
            streams.append(StreamIdle(device, stream, *(ms(w) for w in waits)))
    return tuple(active), tuple(streams), (left_out[0], left_out[1])
