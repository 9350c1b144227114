"""The GPU half of each step, measured with CUDA events: each timed op placed on the host's clock,
each closed step (and the run) given its busy and idle time (:func:`~profilers.timing.idle.charge`).

Placing: a CUDA event's time is on the GPU's own clock, comparable only with other events of the
device. An **anchor** ties that clock to the host's: an event recorded when the GPU had nothing
queued on its stream runs as soon as it is recorded, so its GPU time is the host time it was
recorded at (to the launch latency, a few µs). An op then started at ``anchor_host_ns +
anchor.elapsed_time(op.start)``. Anchors are taken

* at the first timed op of each device: the device is synchronized once (the profiler's own wait,
  not counted as the script's) and an event recorded;
* at each host read of the script (``.item()``, a copy to the host): the op's own end event,
  recorded right after the read drained its stream. Free: the event is there anyway.

NB re-anchoring: the GPU's clock and ``perf_counter`` drift apart by up to tens of ppm. One
anchor at the start would place ops milliseconds off after a few minutes, the size of the waits
they are charged against; a host read per step (a logged loss) re-anchors every step and keeps
the error to the drift over one step (ns). A run with no host read at all keeps its first
anchor: its ops drift, which moves busy time between neighbouring steps (such a run's GPU is
never waiting on the host's reads), not the run's totals.

Work the dispatch mode never sees (``torch.cuda._sleep``, a Triton or extension kernel, NCCL's)
has no events of its own, but the next timed op on its stream waits behind it: when that op's
start event ran later than the host queued it (by more than :data:`SLACK_NS`) and after its
stream's previous timed op ended, the stream was busy with untimed work from the later of the two
until the op started. NB: a lower bound (the untimed work may have begun before the op was
queued), and a stream waiting for another's event counts as busy too (the other stream is).

Resolution is asynchronous and costs the hot path nothing more: a closed step's mark in the
timer's queue (:meth:`GpuTimeline.closed`) is reached once every op queued before it is placed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from profilers.timing.idle import (
    GpuInterval,
    busy_intervals,
    charge,
    follow_named,
    idle_ms,
    name_slices,
)
from profilers.timing.timeline import IDLE_CAUSES, HostInterval, StepTime, line_key

if TYPE_CHECKING:
    from torch.cuda import Stream

    from profilers.timing.cuda_events import TimedOp

_HELD = frozenset(("h2d", "p2p"))
"""Copies to a GPU (a ``Transfer``'s directions) whose interval is copy time when they block the host."""

SLACK_NS = 50_000
"""How long before an idle interval a sync may have returned and still be what the GPU drained
for: the anchors' error (the launch latency of the anchor event, and the host's reading of its
clock around it) is a few µs; 50 µs also covers a thread switch between the two."""

COMPACT_AT = 8192
"""Placed intervals of a device kept before they are merged into their union (exactly what
:func:`~profilers.timing.idle.charge` needs: the busy spans and the op that starts each)."""

MAX_SLICES = 256
"""Idle slices kept per step for the trace (the longest; the sums hold every one)."""


class TimingEvent(Protocol):
    """A CUDA event recorded with ``enable_timing`` (``torch.cuda.Event``; tests stand in)."""

    def query(self) -> bool: ...
    def record(self, stream: Stream) -> None: ...
    def elapsed_time(self, end_event: Any) -> float: ...  # NB: torch's takes its own Event


@dataclass(slots=True, eq=False)
class Anchor:
    """An event the GPU ran at ``host_ns`` on the host's clock (its stream was empty)."""

    device: int
    event: TimingEvent
    host_ns: int

    def ready(self) -> bool:
        return bool(self.event.query())


class StepMark:
    """A closed step in the timer's queue: reached once every op queued before it is placed."""

    __slots__ = ("named", "step")

    def __init__(self, step: StepTime, named: Sequence[tuple[int, int, str, str]] = ()) -> None:
        self.step = step
        self.named = named
        """The step's gaps another line took most of (:func:`~profilers.timing.gaps.
        name_gaps`): its GPU-idle slices there are named by that line."""

    def ready(self) -> bool:
        return True


class GpuTimeline:
    """Placed op intervals per device, and the GPU figures of each closed step and of the run.

    Args:
        origin_ns: the profile's start (the trace's slices are in ms since then).
        keep: closed steps whose figures are kept (the newest; the run's sums hold all).
        slack_ns: see :data:`SLACK_NS`.
    """

    def __init__(self, origin_ns: int, keep: int = 64, slack_ns: int = SLACK_NS) -> None:
        self.origin_ns = origin_ns
        self.keep = max(1, keep)
        self.slack_ns = slack_ns
        self.anchors: dict[int, tuple[int, TimingEvent]] = {}
        """Device -> (host ns, event) of its newest anchor."""
        self.ops: dict[int, list[GpuInterval]] = {}
        """Device -> its placed ops not yet behind every charged step."""
        self.results: OrderedDict[int, dict[str, Any]] = OrderedDict()
        """Step number -> its GPU figures (the newest :attr:`keep`)."""
        self.placed = 0
        self.unplaced = 0
        """Ops resolved before their device had an anchor (none in practice: the first op of a
        device makes one first), or whose events could not be compared."""
        self.anchored = 0
        self.charged_to_ns = origin_ns
        """The end of the last charged step: the run's figures cover the time before it."""
        self.steps_charged = 0
        self._run = _Sums()
        self._later = _Sums()
        """The charged steps after the first with GPU figures (:attr:`StepClock.later`)."""
        self._later_host: StepTime = StepTime(0, 0, 0, {}, 0, 0, [])
        """Those same steps' host figures, summed (``step``: how many; ``end_ns``: their
        walls' sum): a GPU half and its host half always cover the same steps."""
        self.first_result: dict[str, Any] | None = None
        """Step 0's GPU figures (kept whatever :attr:`keep` drops)."""
        self._keys: dict[int, str] = {}
        self._compact_at: dict[int, int] = {}
        self._stream_end: dict[int, int] = {}
        self.untimed_ns = 0
        """Busy time of work no timed op covers, seen as the wait of the op after it."""
        self.timer: Any = None
        """The CUDA timer (:class:`profilers.timing.cuda_events.CudaTimer`) that feeds it."""

    def closed(self, step: StepTime, named: list[tuple[int, int, str, str]]) -> None:
        """The step clock closed ``step`` (``named``: :attr:`StepMark.named`): its figures come
        when the timer reaches this."""
        self.timer.mark(StepMark(step, named))

    @property
    def settled(self) -> bool:
        """Whether every op queued so far is placed (and every closed step charged)."""
        return int(self.timer.pending) == 0

    # -- fed by the CUDA timer (profilers/timing/cuda_events.py), in queue order ----------------

    def anchor(self, mark: Anchor) -> TimingEvent | None:
        """A device's new anchor; returns the event it replaces (to reuse), or None."""
        self.anchored += 1
        old = self.anchors.get(mark.device)
        self.anchors[mark.device] = (mark.host_ns, mark.event)
        return None if old is None else old[1]

    def place(self, timed: TimedOp, ms: float) -> TimingEvent | None:
        """Places the resolved op ``timed`` (a ``TimedOp``) that ran ``ms`` on the GPU. Returns
        the event that is free again when the op's end event became its device's anchor (the
        previous anchor's), else ``timed.end`` itself."""
        found = self.anchors.get(timed.device)
        if found is None:
            self.unplaced += 1
            return timed.end
        host_ns, event = found
        try:
            start = host_ns + round(event.elapsed_time(timed.start) * 1e6)
        except RuntimeError:  # NB: an anchor not complete yet (another thread's op raced it)
            self.unplaced += 1
            return timed.end
        line = timed.line
        # NB: a copy to the GPU the host is blocked in is the copy's time, not busy (idle.py)
        did = timed.found
        t = did[0] if isinstance(did, list) else did
        held = t is not None and t.direction in _HELD and (t.pageable or not t.non_blocking)
        key = line if isinstance(line, str) else self._keys.get(id(line))
        if key is None:
            key = self._keys[id(line)] = line_key(line)
        ops = self.ops.get(timed.device)
        if ops is None:
            ops = self.ops[timed.device] = []
        stream = id(timed.stream)
        ran_from = max(timed.queued_ns, self._stream_end.get(stream, 0))
        if timed.queued_ns and start - ran_from > self.slack_ns:  # untimed work before it
            ops.append(GpuInterval(ran_from, start, stream, key))
            self.untimed_ns += start - ran_from
        end = start + round(ms * 1e6)
        ops.append(GpuInterval(start, end, stream, key, held, timed.queued_ns))
        self._stream_end[stream] = end
        self.placed += 1
        if len(ops) >= self._compact_at.get(timed.device, COMPACT_AT):
            merged = self.ops[timed.device] = compact(ops)
            # NB: spans that stay apart (one per op) are not merged again until twice as many
            self._compact_at[timed.device] = max(COMPACT_AT, 2 * len(merged))
        if timed.anchor_ns:  # a host read: its stream was empty when the end event was recorded
            old = self.anchors.get(timed.device)
            self.anchors[timed.device] = (timed.anchor_ns, timed.end)
            self.anchored += 1
            return None if old is None else old[1]
        return timed.end

    def reached(self, mark: StepMark) -> None:
        """Every op queued before ``mark``'s step ended is placed: its figures, and the run's."""
        step = mark.step
        result = self.charge(step.start_ns, step.end_ns, step.waits, mark.named)
        self.charged_to_ns = step.end_ns
        self.steps_charged += 1
        if result is None:
            return
        result["idle_lines"] = follow_named(result["idle_lines"], step.lines)
        self._run.add(result)
        if step.step:
            self._later.add(result)
            self._later_host.add(step, step.lines)
        else:
            self.first_result = result
        self.results[step.step] = result
        while len(self.results) > self.keep:
            self.results.popitem(last=False)
        for device, ops in self.ops.items():  # NB: no later step can use an op that ended here
            self.ops[device] = [o for o in ops if o.end_ns > step.end_ns]

    # -- figures ---------------------------------------------------------------------------------

    def charge(
        self,
        start_ns: int,
        end_ns: int,
        waits: list[HostInterval],
        named: Sequence[tuple[int, int, str, str]] = (),
    ) -> dict[str, Any] | None:
        """``[start_ns, end_ns)`` on the GPU that was busiest in it (None: no device placed an
        op yet), with its idle slices in ms since the profile's start (launch idle inside a
        gap of ``named`` named by the line that took the gap)."""
        best: tuple[int, int, dict[str, Any]] | None = None
        for device, ops in sorted(self.ops.items()):
            r = charge(start_ns, end_ns, ops, waits, self.slack_ns, slices=MAX_SLICES)
            busy = round(float(r["busy_ms"]) * 1e6)
            if best is None or busy > best[0]:
                best = (busy, device, r)
        if best is None:
            return None
        _, device, r = best
        r["device"] = device
        r["wall_ms"] = (end_ns - start_ns) / 1e6
        r["idle_slices"] = [
            {
                "start_ms": round((a - self.origin_ns) / 1e6, 6),
                "ms": round((b - a) / 1e6, 6),
                "cause": kind,
                "sync_cause": cause,
                "site": line,
            }
            for a, b, kind, cause, line in name_slices(r["idle_slices"], named)
        ]
        spans = r.pop("busy_spans", None)
        if spans is not None:
            r["busy_spans_ms"] = [
                [round((a - self.origin_ns) / 1e6, 6), round((b - self.origin_ns) / 1e6, 6)]
                for a, b in spans
            ]
        if len(self.ops) > 1:
            r["devices"] = sorted(self.ops)
        return r

    def run(self, now_ns: int, open_waits: list[HostInterval], settled: bool) -> dict[str, Any]:
        """The run's figures: every charged step, and when ``settled`` (no op left to place)
        the time since the last one too (the open step, up to ``now_ns``)."""
        sums, end = self._run.copy(), self.charged_to_ns
        if settled and now_ns > end:
            tail = self.charge(end, now_ns, open_waits)
            if tail is not None:
                sums.add(tail)
            end = now_ns
        d = sums.figures(end - self.origin_ns)
        d["steps"] = self.steps_charged
        d["covers_open_step"] = settled
        return d

    def later(self) -> tuple[StepTime, dict[str, Any]] | None:
        """The host and GPU figures of the charged steps after the first that have GPU
        figures (None: none yet), over the same steps: ``StepTime.step`` says how many."""
        if not self._later.steps:
            return None
        host = self._later_host
        snapshot = StepTime(host.step, 0, host.end_ns, dict(host.lines), host.own_ns, host.ops, [])
        d = self._later.figures(host.end_ns)
        d["steps"] = host.step
        return snapshot, d

    def brief(self, step: int) -> dict[str, Any] | None:
        """A step's busy and idle ms by cause, without its lines (the live view's)."""
        r = self.results.get(step)
        if r is None:
            return None
        return {"measured": "measured", "busy_ms": r["busy_ms"], "idle_ms": dict(r["idle_ms"])}


class _Sums:
    """Busy and idle time by cause and line, summed over charged steps."""

    def __init__(self) -> None:
        self.steps = 0
        self.busy_ns = 0
        self.idle_ns = dict.fromkeys(IDLE_CAUSES, 0)
        self.lines: dict[tuple[str, str, str | None], int] = {}

    def copy(self) -> _Sums:
        out = _Sums()
        out.steps, out.busy_ns = self.steps, self.busy_ns
        out.idle_ns, out.lines = dict(self.idle_ns), dict(self.lines)
        return out

    def add(self, r: dict[str, Any]) -> None:
        """Adds a span's figures (:meth:`GpuTimeline.charge`)."""
        self.steps += 1
        self.busy_ns += round(float(r["busy_ms"]) * 1e6)
        for cause, ms in r["idle_ms"].items():
            self.idle_ns[cause] += round(float(ms) * 1e6)
        for d in r["idle_lines"]:
            key = (d["cause"], d["site"], d["sync_cause"])
            self.lines[key] = self.lines.get(key, 0) + round(float(d["ms"]) * 1e6)

    def figures(self, wall_ns: int) -> dict[str, Any]:
        ranked = sorted(self.lines.items(), key=lambda kv: kv[1], reverse=True)
        return {
            "measured": "measured",
            "wall_ms": wall_ns / 1e6,
            "busy_ms": self.busy_ns / 1e6,
            "idle_total_ms": sum(self.idle_ns.values()) / 1e6,
            "idle_ms": idle_ms(self.idle_ns),
            "idle_lines": [
                {"site": line, "cause": kind, "sync_cause": cause, "ms": ns / 1e6}
                for (kind, line, cause), ns in ranked
            ],
        }


def compact(ops: list[GpuInterval]) -> list[GpuInterval]:
    """``ops`` merged into their busy spans, each named after the op that starts it: what
    :func:`~profilers.timing.idle.charge` reads of them is unchanged (the union, and the first
    op at or after each gap's end)."""
    if not ops:
        return ops
    lo = min(o.start_ns for o in ops)
    hi = max(o.end_ns for o in ops)
    first: dict[int, str] = {}
    for o in ops:
        if o.held:
            continue
        if o.start_ns not in first or o.line < first[o.start_ns]:
            first[o.start_ns] = o.line
    held = [o for o in ops if o.held]  # few: kept as they are
    work = [o for o in ops if not o.held]
    return held + [GpuInterval(a, b, -1, first[a]) for a, b in busy_intervals(work, lo, hi)]


def start_gpu_time(recorder: Any, clock: Any) -> GpuTimeline | None:
    """The GPU timeline of a profile whose step clock is ``clock``, when ``recorder`` times ops
    with CUDA events (None otherwise: the GPU half is not measured)."""
    timer = recorder.timer
    if timer is None:
        return None
    line = GpuTimeline(clock.start_ns, keep=clock.steps.maxlen or 64)
    api = timer.api

    def own_wait(device: int) -> None:
        # NB: the profiler's wait for a device's first anchor is not the script's sync
        before, recorder.own_sync = recorder.own_sync, True
        try:
            api.synchronize(device)
        finally:
            recorder.own_sync = before

    timer.own_wait = own_wait
    timer.timeline, line.timer = line, timer
    clock.gpu = line
    return line
