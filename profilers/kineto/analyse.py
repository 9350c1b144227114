"""A rank's trace analysed: per step and device, busy time and the idle time charged to a cause
and a place (the rule in :data:`profilers.kineto.result.DEFINITIONS`, the rule of
:func:`profilers.timing.idle.charge` read off a trace).

Each gap between a device's busy runs ends when its next activity K starts. The gap is the
host's only when K was queued after the gap began (its launch call, by correlation id, began
later: the host was late); then each moment is charged to what the host was doing (in a
DataLoader's ``__next__``: input; blocked in a sync or a blocking copy: sync or copy; in a
collective call: comm), the tail of the wait the GPU ran dry in (the sync that drained it) up to
the GPU work that wait waited for, and past that launch, charged to K's op. When K was already
queued (or was queued before the trace began), the GPU waited on something else (another
stream's work, an event, the other ranks): comm when K is an NCCL kernel, else dependency,
whatever the host was doing (HTA's host-wait / kernel-wait / other split makes the same cut).
The time before a device's first GPU work is warm-up, charged to the op and line that first
queued work: never launch, and left out of the verdict (in a trace that begins with the run: no
ProfilerStep, or steps from ``ProfilerStep#0``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from profilers.kineto.events import KERNEL, KINDS, NO_CALL, HostSpan, Ints, RankTrace, Step, Where
from profilers.kineto.intervals import Union, segments
from profilers.kineto.result import (
    CAUSES,
    Charge,
    DeviceTime,
    RankResult,
    Slice,
    StepTime,
    TraceAnalysis,
    ms,
)
from profilers.kineto.stacks import Places
from profilers.kineto.tables import copy_tables, hta_views, kernel_table
from profilers.timing.verdict import VERDICTS, verdict_of

#: Which host wait wins where two overlap: the outermost reason the user can act on first.
RANKS = {"input": 4, "copy": 3, "sync": 2, "comm": 1}
GPU_BOUND_PCT = 80
"""Busy share of a window at and above which it is GPU-bound."""
STEP_TOP = 3
RUN_TOP = 30
NOTHING_NEXT = Where("(no later GPU work in the trace)")
NO_GPU_WORK = "no GPU work"
MAX_SLICES = 20_000
GAPS = 1 << 13  # charged at a time (each costs a few hundred bytes while it is)
"""The timeline keeps each rank's longest busy runs and idle pieces (docs/trace.md)."""
COMM, LAUNCH, DEPENDENCY, WARMUP = (CAUSES.index(c) for c in CAUSES[3:])
WORDS = {**VERDICTS, "dependency": "dependency-bound"}
"""Each cause's verdict word (warm-up never gives one: it is left out of the verdict)."""


def verdict_for(wall_ns: int, busy_ns: int, comm_only_ns: int, idle_ns: dict[str, int]) -> str:
    """GPU-bound when the GPU was busy with its own work (anything but NCCL kernels running
    alone) for at least GPU_BOUND_PCT of the window after warm-up, else the largest of the idle
    causes, comm counting the exposed NCCL time too (``input-bound``...): a GPU held back a
    fifth of the time is held back by something, however large busy is beside each cause alone.
    A window with no GPU work gets none (``no GPU work``): nothing was launched to be late."""
    wall_ns -= idle_ns.get("warmup", 0)
    if wall_ns <= 0 or busy_ns <= 0:
        return NO_GPU_WORK
    held = dict(idle_ns, comm=idle_ns.get("comm", 0) + comm_only_ns, warmup=0)
    if 100 * (busy_ns - comm_only_ns) >= GPU_BOUND_PCT * wall_ns or not any(held.values()):
        return VERDICTS["busy"]
    return WORDS[max(CAUSES, key=lambda c: held.get(c, 0))]


def _waits(spans: Sequence[HostSpan], places: Places) -> Ints:
    """The host's waits as columns: start, end, cause, place, the wait's own start; first a
    wait of no length before any time (so that a search always finds one)."""
    flat = segments([(s.start_ns, s.end_ns, RANKS[s.cause], s) for s in spans])
    rows = [(NO_CALL, NO_CALL, 0, 0, 0)] + [
        (s, e, CAUSES.index(w.cause), places.id(w.where), w.start_ns) for s, e, w in flat
    ]
    return np.array(rows, np.int64).T


def _by_host(a: Ints, b: Ints, own: Ints, rest: Ints, past: Ints, host: Ints, points: Ints) -> Ints:
    """Each ``[a, b)`` charged to the host's wait at each moment (``host``: :func:`_waits`), its
    first ``own`` ns in no wait to ``rest`` (cause and place), the rest of them to ``past``."""
    lo, hi = np.searchsorted(points, a, "right"), np.searchsorted(points, b)
    count = hi - lo + 1  # each [a, b) cut where a wait begins or ends inside it
    q = np.repeat(np.arange(len(a)), count)
    k = np.arange(len(q)) - np.repeat(np.cumsum(count) - count, count)
    s = np.where(k == 0, a[q], points[lo[q] + k - 1])
    e = np.where(k == count[q] - 1, b[q], points[lo[q] + k])
    j = np.searchsorted(host[0], s, "right") - 1
    free = np.where(host[1, j] > s, 0, e - s)
    before = np.cumsum(free) - free
    mine = np.clip(own[q] - before + before[np.cumsum(count) - count][q], 0, free)
    return np.concatenate(
        [
            np.stack([s, e, host[2, j], host[3, j]])[:, free == 0],
            np.stack([s, s + mine, *rest[:, q]])[:, mine > 0],
            np.stack([s + mine, e, *past[:, q]])[:, (free > 0) & (e > s + mine)],
        ],
        axis=1,
    )


def charge_device(
    rows: Ints,
    span: tuple[int, int],
    trace: RankTrace,
    host: Ints,
    blocked: Ints,
    places: Places,
    cold: bool = True,
) -> Ints:
    """Every idle moment of one device inside ``span``, charged: pieces as columns (start, end,
    cause: an index in CAUSES, place: an id in ``places``) in time order. ``rows``: the
    device's activities sorted by start; ``host``, ``blocked``: the host's waits, all and the
    sync and copy ones (:func:`_waits`); ``cold``: the trace began with the run (its first gap
    is warm-up)."""
    acts, (begin, finish) = trace.activities, span
    s, e = acts.start[rows], acts.end[rows]
    reach = np.maximum(np.maximum.accumulate(e), begin)  # busy until, after each activity
    n = min(int(np.searchsorted(reach, finish)) + 1, len(s))  # NB: then busy to the span's end
    s, e, until = s[:n], e[:n], np.r_[begin, reach[: n - 1]]
    opened = (s > until) & (e > begin)
    last = np.maximum.accumulate(np.where(opened, np.arange(n), -1))
    began = np.where(last >= 0, np.maximum(s[np.maximum(last, 0)], begin), begin)
    gap_end = np.minimum(s, finish)
    g = np.flatnonzero(opened & (gap_end > until))
    # NB: return_inverse: by a sort (numpy 2.4 hashes plain unique(), 4-10x slower on these)
    points = np.r_[np.unique(host[:2], return_inverse=True)[0], -NO_CALL - 1]
    gaps = [until[g], gap_end[g], np.r_[begin, began[:-1]][g], rows[g]]
    if n == len(rows) and finish > reach[-1]:  # after the last GPU work (-1): nothing queued
        gaps = [np.r_[c, x] for c, x in zip(gaps, (reach[-1], finish, began[-1], -1), strict=True)]
    out, warm = [np.zeros((4, 0), np.int64)], cold and len(g) > 0 and g[0] == 0
    for at in range(0, len(gaps[0]), GAPS):  # NB: in chunks, disjoint and in time order
        starts, ends, froms, nxt = (c[at : at + GAPS] for c in gaps)
        launch, nccl = np.where(nxt < 0, finish, acts.launched[nxt]), acts.nccl[nxt] & (nxt >= 0)
        place = places.of(nxt[nxt >= 0])
        if nxt[-1] < 0:
            place = np.r_[place, places.id(NOTHING_NEXT)]
        # NB: K queued before the GPU ran dry (or before the trace began) waited on another
        # stream, an event or the other ranks, not on the host, whatever it was doing
        cause = np.where(launch <= starts, np.where(nccl, COMM, DEPENDENCY), LAUNCH)
        if warm and at == 0:
            cause[0] = WARMUP
        late = cause == LAUNCH
        a, b, p, nccl = starts[late], ends[late], place[late], nccl[late]
        cut, launched = np.minimum(launch[late], b), np.stack([np.full(len(a), LAUNCH), p])
        # the GPU ran dry in a wait: the wait's refill, up to the GPU work it waited for (what
        # the host would have overlapped had it not waited); the host's Python past that: launch
        j = np.searchsorted(blocked[0], a, "right") - 1
        drained = a <= blocked[1, j]
        own = np.where(drained, np.maximum(0, a - np.maximum(blocked[4, j], froms[late])), 0)
        tail, t = b > cut, (b > cut) & ~nccl
        pieces = np.concatenate(
            [
                np.stack([starts, ends, cause, place])[:, ~late],
                _by_host(
                    a,
                    cut,
                    own,
                    np.where(drained, blocked[2:4, j], launched),
                    launched,
                    host,
                    points,
                ),
                np.stack([cut, b, np.full(len(a), COMM), p])[:, tail & nccl],
                _by_host(cut[t], b[t], own[t] * 0, launched[:, t], launched[:, t], host, points),
            ],
            axis=1,
        )
        out.append(pieces[:, np.argsort(pieces[0], kind="stable")])
    return np.concatenate(out, axis=1)


def _pieces_in(
    pieces: Ints, start: int, end: int, wheres: list[Where]
) -> dict[tuple[str, Where], int]:
    """The pieces' time inside ``[start, end)`` by cause and place, in the order they first
    come (``pieces``: as :func:`charge_device` gives them, sorted and disjoint)."""
    lo, hi = np.searchsorted(pieces[1], start, "right"), np.searchsorted(pieces[0], end)
    p = pieces[:, lo : max(lo, hi)]
    ns = np.minimum(p[1], end) - np.maximum(p[0], start)
    keys, first, inv = np.unique(p[2] << 32 | p[3], return_index=True, return_inverse=True)
    summed = np.bincount(inv, weights=ns).astype(np.int64)  # NB: exact below 2**53 ns
    order = np.argsort(first)
    return {
        (CAUSES[k >> 32], wheres[k & 0xFFFFFFFF]): ns
        for k, ns in zip(keys[order].tolist(), summed[order].tolist(), strict=True)
    }


def _device_time(
    device: int, wall_ns: int, busy: Sequence[int], charged: dict[tuple[str, Where], int], top: int
) -> DeviceTime:
    """``busy``: all, compute, all kernels (compute or NCCL), in ns; ``charged``: idle ns by
    (cause, where)."""
    everything, compute, kernels = busy
    by_cause = dict.fromkeys(CAUSES, 0)
    for (cause, _where), ns in charged.items():
        by_cause[cause] += ns
    parts = {"busy": everything / 1e6, **{c: ns / 1e6 for c, ns in by_cause.items()}}
    _, shares = verdict_of(parts)
    verdict = verdict_for(wall_ns, everything, kernels - compute, by_cause)
    ranked = sorted(charged.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return DeviceTime(
        device=device, wall_ms=ms(wall_ns), busy_ms=ms(everything), compute_ms=ms(compute),
        comm_ms=ms(kernels - compute), copy_ms=ms(everything - kernels),
        idle_ms=ms(wall_ns - everything), verdict=verdict, shares_pct=shares,
        idle_by_cause_ms={c: ms(ns) for c, ns in by_cause.items()},
        top=tuple(Charge(cause, where, ms(ns)) for (cause, where), ns in ranked if ns > 0),
    )  # fmt: skip


def _timeline(
    device: int, busy: Union, pieces: Ints, span: tuple[int, int], base: int, slices: int
) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """The device's ``slices`` longest busy runs and idle pieces in ``span``, in their order (the
    run's longest among them), neighbours of one cause and place joined: device, start and end
    (ms, unrounded: the JSON has none of it), cause (-1: busy), place; and every one's length."""
    kept = (busy.ends > span[0]) & (busy.starts < span[1])
    runs = np.maximum(busy.starts[kept], span[0]), np.minimum(busy.ends[kept], span[1])
    key = pieces[2] << 32 | pieces[3]
    heads = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]) | (pieces[0, 1:] != pieces[1, :-1])])
    heads = heads[: pieces.shape[1]]
    tails = np.r_[heads[1:], pieces.shape[1]][: heads.size] - 1  # NB: none where no piece
    start = (np.r_[runs[0], pieces[0, heads]] - base) / 1e6
    end = (np.r_[runs[1], pieces[1, tails]] - base) / 1e6
    keep = np.sort(np.argsort(start - end, kind="stable")[:slices])  # NB: labelled, these only
    labels = (np.r_[np.full(len(runs[0]), -1), pieces[i, heads]][keep] for i in (2, 3))
    return [np.full(len(keep), device), start[keep], end[keep], *labels], end - start


def analyse_rank(trace: RankTrace, top: int = RUN_TOP, slices: int = MAX_SLICES) -> RankResult:
    """Steps, busy and idle by cause per device, the costliest places, kernels and copies (the
    timeline: the ``slices`` longest busy runs and idle pieces)."""
    windows = trace.steps or [Step("whole trace", None, *trace.span_ns)]
    span = (windows[0].start_ns, max(w.end_ns for w in windows))
    w_starts = np.array([w.start_ns for w in windows], np.int64)
    w_ends = np.array([w.end_ns for w in windows], np.int64)
    places = Places(trace)
    host = _waits(trace.spans, places)
    blocked = _waits([s for s in trace.spans if s.cause in ("sync", "copy")], places)
    inputs = np.array([(s.start_ns, s.end_ns) for s in trace.spans if s.cause == "input"])
    input_ns = Union(*inputs.reshape(-1, 2).T.astype(np.int64)).within(w_starts, w_ends).tolist()
    # NB: steps numbered from 1 up follow torch.profiler's own warm-up (schedule(wait, warmup)):
    # the GPU ran before the trace, so the first gap is no warm-up of the run's
    cold = not trace.steps or trace.steps[0].number == 0
    acts = trace.activities
    order = np.lexsort((acts.end, acts.start))
    by_device = {d: order[acts.device[order] == d] for d in np.unique(acts.device).tolist()}
    steps: list[list[DeviceTime]] = [[] for _ in windows]
    run: list[DeviceTime] = []
    lines: Counter[tuple[str, Where]] = Counter()
    timeline, every = [], []  # each device's longest slices, and every slice's length
    base = trace.span_ns[0]
    for device, rows in by_device.items():
        s, e = acts.start[rows], acts.end[rows]
        kernel = acts.kind[rows] == KINDS.index(KERNEL)
        compute = kernel & ~acts.nccl[rows]
        unions = [Union(s, e), Union(s[compute], e[compute]), Union(s[kernel], e[kernel])]
        busy = [u.within(w_starts, w_ends) for u in unions]
        del unions[1:], s, e  # NB: held through the charging, they were 5 MB on x4
        pieces = charge_device(rows, span, trace, host, blocked, places, cold)
        longest_here, lengths_here = _timeline(device, unions[0], pieces, span, base, slices)
        timeline.append(longest_here)
        every.append(lengths_here)
        charged_run: Counter[tuple[str, Where]] = Counter()
        for i, w in enumerate(windows):
            charged = _pieces_in(pieces, w.start_ns, w.end_ns, places.wheres)
            charged_run.update(charged)
            busy_ns = [int(b[i]) for b in busy]
            steps[i].append(_device_time(device, w.end_ns - w.start_ns, busy_ns, charged, STEP_TOP))
        wall = sum(w.end_ns - w.start_ns for w in windows)
        totals = [int(b.sum()) for b in busy]
        run.append(_device_time(device, wall, totals, charged_run, STEP_TOP))
        lines.update(charged_run)
    in_span = np.flatnonzero((acts.start >= span[0]) & (acts.start < span[1]))
    copies, copy_lines = copy_tables(trace, in_span, places)
    active, streams, (unlaunched, unlaunched_ns) = hta_views(by_device, trace)
    # the timeline: its ``slices`` longest, longest first (ties: in time order per device)
    cols = [np.concatenate(col) for col in zip(*timeline, strict=True)]
    timeline.clear()
    longest = np.argsort(cols[1] - cols[2], kind="stable")[:slices]
    lengths, longest_ms = np.concatenate(every), (cols[2] - cols[1])[longest]
    left = (len(lengths) - len(longest), sum(lengths.tolist()) - sum(longest_ms.tolist()))
    kept = tuple(
        Slice(
            int(d), s, e, *((CAUSES[int(c)], places.wheres[int(p)]) if c >= 0 else ("busy", None))
        )
        for d, s, e, c, p in zip(*(col[longest].tolist() for col in cols), strict=True)
    )
    notes = list(trace.notes)
    if not trace.steps:
        notes.append("no ProfilerStep#N in the trace: one window, the whole trace")
    if not trace.has_stacks:
        notes.append("no Python stacks (profile with with_stack=True for lines): CPU ops named")
    if unlaunched:
        took = f"{unlaunched_ns / 1e3:.0f} us"
        took = f"{unlaunched_ns / 1e6:.1f} ms" if unlaunched_ns >= 100_000 else took
        notes.append(
            f"{unlaunched} GPU activities ({took} of GPU time) have no launch call in the trace "
            "(queued before it began): busy counts them, HTA (and the HTA view here) leaves them out"
        )
    return RankResult(
        rank=trace.rank,
        path=trace.path,
        gpus={d: trace.gpus.get(d, "") for d in by_device},
        steps=tuple(
            StepTime(
                w.name,
                w.number,
                ms(w.start_ns - base),
                ms(w.end_ns - w.start_ns),
                ms(input_ns[i]),
                tuple(devs),
            )
            for i, (w, devs) in enumerate(zip(windows, steps, strict=True))
        ),
        run=tuple(run),
        lines=tuple(
            Charge(c, w, ms(ns))
            for (c, w), ns in sorted(lines.items(), key=lambda kv: kv[1], reverse=True)[:top]
            if ns > 0
        ),
        kernels=kernel_table(acts, in_span),
        copies=copies,
        copy_lines=copy_lines,
        active=active,
        streams=streams,
        has_stacks=trace.has_stacks,
        has_steps=bool(trace.steps),
        notes=tuple(notes),
        timeline=kept,
        timeline_left=left,
        base_us=trace.base_us + trace.span_ns[0] / 1000,
    )


def analyse(traces: Sequence[RankTrace], paths: Sequence[str] = ()) -> TraceAnalysis:
    return TraceAnalysis(tuple(paths), tuple(analyse_rank(t) for t in traces))
