"""The GPU half of a step: busy time (the union of the ops' intervals on all of a device's
streams) and idle time (the rest of the step), each idle nanosecond charged to one cause and one
line. Pure: exact on synthetic timelines (tests/test_time_idle.py).

The rule (the design's "charging idle time", made precise): an idle interval ``[a, b)`` ends
when the next op starts on the GPU (or the step ends). From the moment that op was queued the GPU
waited on other GPU work (another stream, an event): ``dependency``, at the op's line, whatever
the host was doing. Before it, the op was not queued yet, so the interval goes to what the host
was doing meanwhile:

* the parts the host spent in a wait (:class:`~profilers.timing.timeline.HostInterval`: input,
  sync, copy, collective) go to that wait's cause and line;
* the host's Python right after a wait that ended inside the interval, or when it began (a sync
  returns as the GPU drains), goes to that wait, up to the GPU work that ran while the host
  waited (the drain): had the host not waited, it would have run that Python while the GPU
  worked, so at most that much of the idle is the wait's. The rest of the Python would have left
  the GPU idle all the same: ``launch``, as below. So a sync's refill is its own (it waits for
  queued work), an input wait's is not (the GPU idled through it), and a blocking copy's is, up
  to the copy (the copy is the work it waited for);
* any other host time goes to ``launch``, at the line of the op that ends the interval (the op
  queued while the queue was empty); at the step's end, with no op to come, to
  :data:`END_OF_STEP`.

Host and GPU times share one clock (ns); on a GPU the device's are placed on it through an event
recorded at a known host time (profilers/timing/gpu_time.py).

NB a copy to a GPU that blocks the host (pageable, or not ``non_blocking``: ``held``) is no busy
time: while it runs the host is stuck in it and no kernel can be queued, and on pageable memory
most of it is the driver staging the data through a pinned buffer, not the GPU working. Its
interval is charged as ``copy`` time at its line, before the host's own wait for it (which the
host half counts as a sync, ``copy_to_device``): the fix is the copy's (pin, ``non_blocking``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from profilers.timing.timeline import COPY, DEPENDENCY, IDLE_CAUSES, LAUNCH, HostInterval

END_OF_STEP = "(end of step)"


@dataclass(slots=True, eq=False)
class GpuInterval:
    """One op on a device: ``[start_ns, end_ns)`` on the host's clock, its stream, the line
    (``file:line``) that launched it; ``held``: a copy to the GPU the host was blocked in;
    ``queued_ns``: when the host queued it (0: not known)."""

    start_ns: int
    end_ns: int
    stream: int
    line: str
    held: bool = False
    queued_ns: int = 0


def _carve(waits: list[HostInterval], held: list[HostInterval]) -> list[HostInterval]:
    """``waits`` less the spans of ``held`` (which take their place there), plus ``held``."""
    out = list(held)
    for w in waits:
        pieces = [(w.start_ns, w.end_ns)]
        for h in held:
            pieces = [
                part
                for a, b in pieces
                for part in ((a, min(b, h.start_ns)), (max(a, h.end_ns), b))
                if part[1] > part[0]
            ]
        out += [HostInterval(w.kind, w.cause, w.line, a, b) for a, b in pieces]
    return out


def busy_intervals(ops: list[GpuInterval], start_ns: int, end_ns: int) -> list[tuple[int, int]]:
    """The union of the ops' intervals within ``[start_ns, end_ns)``, sorted and disjoint."""
    spans = sorted(
        (max(o.start_ns, start_ns), min(o.end_ns, end_ns))
        for o in ops
        if o.end_ns > start_ns and o.start_ns < end_ns
    )
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap_ns(spans: list[tuple[int, int]], a: int, b: int) -> int:
    """How much of ``[a, b)`` the sorted, disjoint ``spans`` cover."""
    i = max(0, bisect_left(spans, (a, a)) - 1)
    got = 0
    while i < len(spans) and spans[i][0] < b:
        lo, hi = max(spans[i][0], a), min(spans[i][1], b)
        if hi > lo:
            got += hi - lo
        i += 1
    return got


def _charge_gap(
    a: int,
    b: int,
    next_line: str,
    waits: list[HostInterval],
    slack_ns: int,
    add: Any,
    drained: Any,
) -> None:
    """Charges the idle interval ``[a, b)`` (``waits`` sorted by start): ``add(kind, cause,
    line, start_ns, end_ns)`` per piece. ``drained(wait)``: the GPU work that ran while the host
    was in ``wait``, the most of the Python after it that is the wait's (its refill)."""
    t = a
    refill: HostInterval | None = None
    left = 0

    def python(start: int, end: int) -> None:
        nonlocal left
        own = min(end - start, left) if refill is not None else 0
        if own > 0:
            assert refill is not None
            add(refill.kind, refill.cause, refill.line, start, start + own)
            left -= own
        if end > start + own:
            add(LAUNCH, None, next_line, start + own, end)

    for w in waits:
        if w.end_ns < a - slack_ns or w.start_ns >= b:
            continue
        s, e = max(w.start_ns, a), min(w.end_ns, b)
        if s > t:  # host Python before this wait
            python(t, s)
        if e > max(s, t):
            add(w.kind, w.cause, w.line, max(s, t), e)
        t = max(t, e)
        refill, left = w, drained(w)
    if b > t:
        python(t, b)


def charge(
    start_ns: int,
    end_ns: int,
    ops: list[GpuInterval],
    waits: list[HostInterval],
    slack_ns: int = 0,
    slices: int = 0,
) -> dict[str, Any]:
    """Busy and idle time of the step ``[start_ns, end_ns)`` on one device, the idle time by
    cause and by (cause, line). ``slack_ns``: how long before an idle interval a wait may have
    ended and still be the one the GPU drained for (host and GPU clocks agree to about that).

    Returns ``{"measured", "busy_ms", "idle_ms": {cause: ms}, "idle_total_ms", "idle_lines":
    [{"site", "cause", "sync_cause", "ms"}]}``; the parts add up to the idle time exactly.
    With ``slices``, also ``"idle_slices"``: the longest ``slices`` pieces of idle time as
    ``(start_ns, end_ns, cause, sync_cause, line)``, in time order.
    """
    held = [HostInterval(COPY, None, o.line, o.start_ns, o.end_ns) for o in ops if o.held]
    # NB: what a wait waited for: the GPU's work, a held copy's own included
    work = busy_intervals(ops, start_ns, end_ns)
    if held:
        ops = [o for o in ops if not o.held]
        waits = _carve(waits, held)
    busy = busy_intervals(ops, start_ns, end_ns) if held else work
    starts = sorted((o.start_ns, o.line, o.queued_ns) for o in ops)
    by_line: dict[tuple[str, str, str | None], int] = {}
    totals = dict.fromkeys(IDLE_CAUSES, 0)
    ordered = sorted(waits, key=lambda w: w.start_ns)
    pieces: list[tuple[int, int, str, str | None, str]] = []

    def add(kind: str, cause: str | None, line: str, a: int, b: int) -> None:
        totals[kind] += b - a
        key = (kind, line, cause)
        by_line[key] = by_line.get(key, 0) + b - a
        if slices:
            pieces.append((a, b, kind, cause, line))

    def drained(w: HostInterval) -> int:
        return overlap_ns(work, w.start_ns, w.end_ns + slack_ns)

    t = start_ns
    for a, b in [*busy, (end_ns, end_ns)]:
        if a > t:
            i = bisect_left(starts, (a, "", 0))  # the first op to start at or after a
            nxt = i < len(starts) and a < end_ns
            next_line = starts[i][1] if nxt else END_OF_STEP
            # NB: the host's only when the op that ends the gap was queued after the gap began
            # (the host was late); from its queueing on it waited on other GPU work (another
            # stream, an event): dependency, whatever the host did (the launch's own latency,
            # within the clocks' slack, stays the host's)
            queued = starts[i][2] if nxt else 0
            cut = a if not queued or queued >= a - slack_ns else max(t, queued)
            if cut > t:
                _charge_gap(t, cut, next_line, ordered, slack_ns, add, drained)
            if a > cut:
                add(DEPENDENCY, None, next_line, cut, a)
        t = max(t, b)
    busy_ns = sum(b - a for a, b in busy)
    lines = sorted(by_line.items(), key=lambda kv: kv[1], reverse=True)
    out: dict[str, Any] = {
        "measured": "measured",
        "busy_ms": busy_ns / 1e6,
        "idle_total_ms": (end_ns - start_ns - busy_ns) / 1e6,
        "idle_ms": idle_ms(totals),
        "idle_lines": [
            {"site": line, "cause": kind, "sync_cause": cause, "ms": ns / 1e6}
            for (kind, line, cause), ns in lines
        ],
    }
    if slices:
        longest = sorted(pieces, key=lambda p: p[1] - p[0], reverse=True)[:slices]
        out["idle_slices"] = sorted(longest, key=lambda p: p[0])
        if len(busy) <= slices:  # NB: whole or not at all (energy integrates the gaps between)
            out["busy_spans"] = busy
    return out


def idle_ms(ns: dict[str, int]) -> dict[str, float]:
    """Idle ns by cause as the report's ms; ``dependency`` only where there was some (a
    single-stream step never waits on other GPU work)."""
    return {k: v / 1e6 for k, v in ns.items() if v or k != DEPENDENCY}


def follow_named(
    idle_lines: list[dict[str, Any]], lines: dict[str, Any], steps: int = 1
) -> list[dict[str, Any]]:
    """``idle_lines`` (:func:`charge`'s, costliest first) with the GPU's launch idle at each
    line split as the stack sampler split that line's host work (``lines``: ``file:line`` ->
    :class:`~profilers.timing.line_time.LineTime`, its ``named_out``).

    NB: launch idle goes to the op that ended the idle stretch; a stretch of 5 ms or more with
    no op (a ``time.sleep``, a file read) is the line the sampler read there, not that op's: the
    host half moved that time already, and the GPU's idle follows it, first: the GPU idled
    through such a stretch (or its end, once the queue ran dry), where the op's own Python
    after it is short. So up to the time named, the idle goes to the named lines in their
    shares; the op's line keeps the rest. ``steps``: how many steps ``lines`` sum (the idle
    lines being one step's: a typical step's, replayed)."""
    out: dict[tuple[str, str, str | None], float] = {}
    for d in idle_lines:
        key = (d["cause"], d["site"], d["sync_cause"])
        ms = float(d["ms"])
        rec = lines.get(d["site"]) if d["cause"] == LAUNCH else None
        named: dict[str, int] = rec.named_out if rec is not None else {}
        whole = sum(named.values()) / 1e6 / max(1, steps)
        if whole <= 0:
            out[key] = out.get(key, 0.0) + ms
            continue
        moved = min(ms, whole)
        out[key] = out.get(key, 0.0) + ms - moved
        for other, ns in named.items():
            k = (LAUNCH, other, None)
            out[k] = out.get(k, 0.0) + moved * ns / 1e6 / max(1, steps) / whole
    ranked = sorted(out.items(), key=lambda kv: kv[1], reverse=True)
    return [
        {"site": line, "cause": kind, "sync_cause": cause, "ms": ms}
        for (kind, line, cause), ms in ranked
        if ms > 0
    ]


Slice = tuple[int, int, str, str | None, str]


def name_slices(slices: list[Slice], named: Sequence[tuple[int, int, str, str]]) -> list[Slice]:
    """``slices`` (:func:`charge`'s ``idle_slices``) with each launch slice's part inside a gap
    of ``named`` (``(start_ns, end_ns, the line charged, the line that took most of it)``, the
    stack sampler's) named by that line: the trace agrees with :func:`follow_named`."""
    out: list[Slice] = []
    for a, b, kind, cause, line in slices:
        for start, end, charged, top in sorted(named):
            if kind != LAUNCH or charged != line or end <= a or start >= b:
                continue
            if start > a:
                out.append((a, start, kind, cause, line))
            out.append((max(a, start), min(b, end), kind, cause, top))
            a = min(b, end)
            if a >= b:
                break
        if a < b:
            out.append((a, b, kind, cause, line))
    return out
