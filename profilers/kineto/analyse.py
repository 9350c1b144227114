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

from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profilers.kineto.events import KERNEL, Activity, HostSpan, RankTrace, Step, Where
from profilers.kineto.intervals import Segments, Union
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
from profilers.kineto.stacks import op_of, where_of
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


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of a gap, charged."""

    start_ns: int
    end_ns: int
    cause: str
    where: Where


def _places(trace: RankTrace) -> Callable[[Activity], Where]:
    """The place of each GPU activity's launch (cached: many share an op)."""
    cache: dict[int, Where] = {}
    places: dict[Where, Where] = {}

    def of(a: Activity) -> Where:
        found = cache.get(a.correlation)
        if found is None:
            call = trace.launches.get(a.correlation)
            if call is None:
                found = Where(f"(launch not in trace: {a.name[:60]})")
            else:
                found = where_of(trace, op_of(trace, call) or call)
            # NB: one object per place (a few hundred, not one per launch): comparing and
            # hashing the pieces' places then mostly stops at identity
            found = cache[a.correlation] = places.setdefault(found, found)
        return found

    return of


def _charge_gap(
    start: int,
    end: int,
    nxt: Activity | None,
    trace: RankTrace,
    host: Segments[HostSpan],
    blocked: Segments[HostSpan],
    place: Callable[[Activity], Where],
    busy_from: int,
    first: bool = False,
) -> list[Piece]:
    """``busy_from``: where the busy run that ends at ``start`` began; ``first``: no GPU work
    on the device before it (warm-up)."""
    launch = trace.launches.start(nxt.correlation) if nxt is not None else None
    where_next = place(nxt) if nxt is not None else NOTHING_NEXT
    if first:
        return [Piece(start, end, "warmup", where_next)]
    if nxt is not None and (launch is None or launch <= start):
        # NB: K was queued before the GPU ran dry (or before the trace began): it waited on
        # another stream, an event or the other ranks, not on the host, whatever it was doing
        return [Piece(start, end, "comm" if nxt.nccl else "dependency", where_next)]
    cut = end if launch is None else min(launch, end)
    pieces: list[Piece] = []
    if cut > start:
        # the GPU ran dry in a wait: the wait's refill, up to the GPU work it waited for (what
        # the host would have overlapped had it not waited); the host's Python past that is launch
        drained = blocked.at(start)
        own = max(0, start - max(drained.start_ns, busy_from)) if drained else None
        rest = (drained.cause, drained.where) if drained else ("launch", where_next)
        pieces += _by_host(start, cut, host, rest, own, ("launch", where_next))
    if end > cut:
        if nxt is not None and nxt.nccl:
            pieces.append(Piece(cut, end, "comm", where_next))
        else:
            pieces += _by_host(cut, end, host, ("launch", where_next))
    return pieces


def _by_host(
    start: int,
    end: int,
    host: Segments[HostSpan],
    rest: tuple[str, Where],
    rest_ns: int | None = None,
    past: tuple[str, Where] | None = None,
) -> list[Piece]:
    """``[start, end)`` charged to the host's wait at each moment, ``rest`` where it had none
    (its first ``rest_ns`` only, if given; ``past`` the rest)."""
    pieces: list[Piece] = []
    left = rest_ns

    def free(a: int, b: int) -> None:
        nonlocal left
        if left is None or past is None:
            pieces.append(Piece(a, b, *rest))
            return
        own = min(b - a, left)
        if own > 0:
            pieces.append(Piece(a, a + own, *rest))
            left -= own
        if b > a + own:
            pieces.append(Piece(a + own, b, *past))

    t = start
    for s, e, span in host.overlapping(start, end):
        if s > t:
            free(t, s)
        pieces.append(Piece(s, e, span.cause, span.where))
        t = e
    if end > t:
        free(t, end)
    return pieces


def charge_device(
    acts: list[Activity],
    span: tuple[int, int],
    trace: RankTrace,
    host: Segments[HostSpan],
    blocked: Segments[HostSpan],
    place: Callable[[Activity], Where],
    cold: bool = True,
) -> list[Piece]:
    """Every idle moment of one device inside ``span``, charged (``acts`` sorted by start);
    ``cold``: the trace began with the run (its first gap is warm-up)."""
    pieces: list[Piece] = []
    busy_until = busy_from = span[0]
    for i, a in enumerate(acts):
        if a.start_ns > busy_until and a.end_ns > span[0]:
            gap_end = min(a.start_ns, span[1])
            if gap_end > busy_until:
                pieces += _charge_gap(
                    busy_until, gap_end, a, trace, host, blocked, place, busy_from, cold and i == 0
                )
            busy_from = max(a.start_ns, span[0])
        busy_until = max(busy_until, a.end_ns)
        if busy_until >= span[1]:
            return pieces
    if span[1] > busy_until:
        pieces += _charge_gap(busy_until, span[1], None, trace, host, blocked, place, busy_from)
    return pieces


def _pieces_in(
    pieces: Sequence[Piece], ends: Sequence[int], w: Step
) -> dict[tuple[str, Where], int]:
    """The pieces' time inside ``w`` by cause and place (``ends``: each piece's end, sorted)."""
    out: dict[tuple[str, Where], int] = defaultdict(int)
    # NB: pieces are sorted and disjoint: a window takes a run of them, found by bisection
    for i in range(bisect_right(ends, w.start_ns), len(pieces)):
        p = pieces[i]
        if p.start_ns >= w.end_ns:
            break
        out[(p.cause, p.where)] += min(p.end_ns, w.end_ns) - max(p.start_ns, w.start_ns)
    return out


def _device_time(
    device: int,
    wall_ns: int,
    busy: Sequence[int],
    charged: dict[tuple[str, Where], int],
    top: int,
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
        device=device,
        wall_ms=ms(wall_ns),
        busy_ms=ms(everything),
        compute_ms=ms(compute),
        comm_ms=ms(kernels - compute),
        copy_ms=ms(everything - kernels),
        idle_ms=ms(wall_ns - everything),
        idle_by_cause_ms={c: ms(ns) for c, ns in by_cause.items()},
        verdict=verdict,
        shares_pct=shares,
        top=tuple(Charge(cause, where, ms(ns)) for (cause, where), ns in ranked if ns > 0),
    )


def _timeline(
    device: int, busy: Union, pieces: Sequence[Piece], span: tuple[int, int], base: int
) -> list[Slice]:
    """The device's busy runs and idle pieces in ``span``, neighbours with one cause and place
    joined (in ms, unrounded: the JSON has none of it)."""
    out = [
        Slice(device, (max(s, span[0]) - base) / 1e6, (min(e, span[1]) - base) / 1e6, "busy")
        for s, e in zip(busy.starts, busy.ends, strict=True)
        if e > span[0] and s < span[1]
    ]
    last: Piece | None = None
    for p in [*pieces, None]:
        if last is not None and p is not None and (p.cause, p.where) == (last.cause, last.where):
            if p.start_ns == last.end_ns:
                last = Piece(last.start_ns, p.end_ns, p.cause, p.where)
                continue
        if last is not None:
            start, end = (last.start_ns - base) / 1e6, (last.end_ns - base) / 1e6
            out.append(Slice(device, start, end, last.cause, last.where))
        last = p
    return out


def analyse_rank(trace: RankTrace, top: int = RUN_TOP) -> RankResult:
    """Steps, busy and idle by cause per device, the costliest places, kernels and copies."""
    windows = trace.steps or [Step("whole trace", None, *trace.span_ns)]
    span = (windows[0].start_ns, max(w.end_ns for w in windows))
    ranked = [(s.start_ns, s.end_ns, RANKS[s.cause], s) for s in trace.spans]
    host = Segments(ranked)
    blocked = Segments([r for r in ranked if r[3].cause in ("sync", "copy")])
    inputs = Union((s.start_ns, s.end_ns) for s in trace.spans if s.cause == "input")
    place = _places(trace)
    # NB: steps numbered from 1 up follow torch.profiler's own warm-up (schedule(wait, warmup)):
    # the GPU ran before the trace, so the first gap is no warm-up of the run's
    cold = not trace.steps or trace.steps[0].number == 0
    by_device: dict[int, list[Activity]] = defaultdict(list)
    for a in sorted(trace.activities, key=lambda a: (a.start_ns, a.end_ns)):
        by_device[a.device].append(a)
    steps: list[list[DeviceTime]] = [[] for _ in windows]
    run: list[DeviceTime] = []
    lines: Counter[tuple[str, Where]] = Counter()
    timeline: list[Slice] = []
    for device, acts in sorted(by_device.items()):
        unions = (
            Union((a.start_ns, a.end_ns) for a in acts),
            Union((a.start_ns, a.end_ns) for a in acts if a.kind == KERNEL and not a.nccl),
            Union((a.start_ns, a.end_ns) for a in acts if a.kind == KERNEL),
        )
        pieces = charge_device(acts, span, trace, host, blocked, place, cold)
        ends = [p.end_ns for p in pieces]
        timeline += _timeline(device, unions[0], pieces, span, trace.span_ns[0])
        totals = [0, 0, 0]
        wall = 0
        charged_run: Counter[tuple[str, Where]] = Counter()
        for i, w in enumerate(windows):
            busy = [u.within(w.start_ns, w.end_ns) for u in unions]
            charged = _pieces_in(pieces, ends, w)
            charged_run.update(charged)
            steps[i].append(_device_time(device, w.end_ns - w.start_ns, busy, charged, STEP_TOP))
            totals = [t + b for t, b in zip(totals, busy, strict=True)]
            wall += w.end_ns - w.start_ns
        run.append(_device_time(device, wall, totals, charged_run, STEP_TOP))
        lines.update(charged_run)
    in_span = [a for a in trace.activities if span[0] <= a.start_ns < span[1]]
    copies, copy_lines = copy_tables(in_span, place)
    active, streams, (unlaunched, unlaunched_ns) = hta_views(by_device, trace)
    base = trace.span_ns[0]
    notes = list(trace.notes)
    if not trace.steps:
        notes.append("no ProfilerStep#N in the trace: one window, the whole trace")
    if not trace.has_stacks:
        notes.append("no Python stacks (profile with with_stack=True for lines): CPU ops named")
    if unlaunched:
        took = (
            f"{unlaunched_ns / 1e6:.1f} ms"
            if unlaunched_ns >= 100_000
            else f"{unlaunched_ns / 1e3:.0f} us"
        )
        notes.append(
            f"{unlaunched} GPU activities ({took} of GPU time) have no "
            "launch call in the trace (queued before it began): busy counts them, "
            "HTA (and the HTA view here) leaves them out"
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
                ms(inputs.within(w.start_ns, w.end_ns)),
                tuple(devs),
            )
            for w, devs in zip(windows, steps, strict=True)
        ),
        run=tuple(run),
        lines=tuple(
            Charge(c, w, ms(ns))
            for (c, w), ns in sorted(lines.items(), key=lambda kv: kv[1], reverse=True)[:top]
            if ns > 0
        ),
        kernels=kernel_table(in_span),
        copies=copies,
        copy_lines=copy_lines,
        active=active,
        streams=streams,
        has_stacks=trace.has_stacks,
        has_steps=bool(trace.steps),
        notes=tuple(notes),
        timeline=tuple(timeline),
        base_us=trace.base_us + trace.span_ns[0] / 1000,
    )


def analyse(traces: Sequence[RankTrace], paths: Sequence[str] = ()) -> TraceAnalysis:
    return TraceAnalysis(tuple(paths), tuple(analyse_rank(t) for t in traces))
