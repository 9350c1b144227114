"""The host timeline of a profiled run: per step, where the host's time went, per line and cause.

The clock is ``time.perf_counter_ns`` throughout (integers: no rounding drift over long runs).
What one step holds, and what a later replay of the step reads:

* :class:`~profilers.timing.line_time.LineTime`: per line, nanoseconds by cause: ``launch`` (the
  user's Python and the ops it ran, i.e. the host work between waits), ``input`` (inside a
  DataLoader iterator's ``__next__``), ``sync`` (blocked in a sync, also by sync cause), ``copy``
  (in a blocking copy), ``comm`` (in a collective or ``work.wait()``); with the counts a
  CUDA-graph capture cares about (syncs, host reads, pageable copies);
* :class:`HostInterval`: each wait as an interval on the host clock, with its cause and line (the
  newest :data:`MAX_WAITS` per step: the replay's blocking points, and the trace's slices);
* :class:`StepTime`: one closed step: its bounds, its lines, its waits, the profiler's own time
  and the number of ops it ran.

:class:`StepClock` is what the hot path writes into, for the thread that entered the profile (the
thread whose wall time a step is). Every host nanosecond of a step lands in exactly one place:
a line's cause, or the profiler's own time. The parts add up to the step's wall time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from profilers.timing.gaps import LONG_GAP_NS, MAX_GAPS, STEP_END, GapSampler, name_gaps
from profilers.timing.line_time import LineTime

if TYPE_CHECKING:
    from profilers.counting.calibrate import Prober  # noqa: TID251 (types only)
    from profilers.timing.gpu_time import GpuTimeline
    from profilers.timing.oplog import OpLog


class SourceLine(Protocol):
    """A line of user code as the hot path passes it (its ``LineStats``)."""

    file: str
    line: int


INPUT = "input"
SYNC = "sync"
COPY = "copy"
COMM = "comm"
LAUNCH = "launch"
WAITS = (INPUT, SYNC, COPY, COMM)
"""Causes where the host waits (on the GPU, the loader or the other ranks)."""
CAUSES = (*WAITS, LAUNCH)
DEPENDENCY = "dependency"
"""GPU idle with the work that ends it already queued: it waited on other GPU work (another
stream, an event), not on the host (profilers/timing/idle.py)."""
IDLE_CAUSES = (*WAITS, DEPENDENCY, LAUNCH)
"""What a GPU's idle time is charged to."""

UNATTRIBUTED = "(between counted ops)"
"""The line of host work on the fast path (``--no-kernel-timing``), which sees only the ops
that copy, sync or communicate: the Python between them has no line there."""

MAX_WAITS = 256
"""Wait intervals kept per step (the newest; the rest are still in the sums)."""

MAX_LINES = 12
"""Lines kept per closed step (the costliest; the rest summed as ``(other lines)``)."""

OTHER_LINES = "(other lines)"


class HostInterval:
    """One wait of the host: ``kind`` (a cause of :data:`WAITS`), ``cause`` (the sync's cause,
    else None), the line (``file:line``) and its bounds on the host clock."""

    __slots__ = ("cause", "end_ns", "kind", "line", "start_ns")

    def __init__(self, kind: str, cause: str | None, line: str, start_ns: int, end_ns: int):
        self.kind, self.cause, self.line = kind, cause, line
        self.start_ns, self.end_ns = start_ns, end_ns


class StepTime:
    """A closed step: ``[start_ns, end_ns)`` on the host clock, its lines (``file:line`` ->
    :class:`LineTime`), its newest waits, the profiler's own time in it and its op count."""

    __slots__ = ("end_ns", "lines", "ops", "own_ns", "start_ns", "step", "waits", "waits_dropped")

    def __init__(
        self,
        step: int,
        start_ns: int,
        end_ns: int,
        lines: dict[str, LineTime],
        own_ns: int,
        ops: int,
        waits: list[HostInterval],
        waits_dropped: int = 0,
    ) -> None:
        self.step, self.start_ns, self.end_ns, self.lines = step, start_ns, end_ns, lines
        self.own_ns, self.ops, self.waits, self.waits_dropped = own_ns, ops, waits, waits_dropped

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    def add(self, step: StepTime, lines: dict[str, LineTime]) -> None:
        """Adds a closed ``step`` (``lines``: its lines) to this sum of steps: ``step`` counts
        them, ``end_ns`` moves on by their walls."""
        self.step += 1
        self.end_ns += step.wall_ns
        self.own_ns += step.own_ns
        self.ops += step.ops
        merge_lines(self.lines, lines)


def line_key(line: object) -> str:
    """``file:line`` of a line's accumulator (the key the report's timeline uses too)."""
    if line is None:
        return UNATTRIBUTED
    if isinstance(line, str):  # a line named by a sample (profilers/timing/gaps.py)
        return line
    at = cast(SourceLine, line)  # NB: no isinstance: a Protocol's costs 8 us, and copies call it
    return f"{at.file}:{at.line}"


class StepClock:
    """The host timeline of the profile's thread, written by the hot path.

    Per op (profilers/counting/dispatch.py, inlined there): the host time since the previous event, less
    the profiler's calibrated cost outside its hot path (``outside_ns``), plus the op's own run,
    goes to the op's line as ``launch``; the hot path's own time goes to ``own_ns``. A wait
    (:meth:`wait`) charges the time before it the same way and its own length to its cause.

    Args:
        start_ns: when the first step began (the profile's start).
        keep: closed steps kept (the newest); older ones are in the run's sums only.
        outside_ns: the profiler's cost per op that its hot path cannot see (calibrated).
        lines_measured: False on the fast path: host work between counted ops has no line of
            its own; each such gap is noted for the sampler's readings to name.
    """

    __slots__ = (
        "first",
        "gaps",
        "gpu",
        "last_ns",
        "last_line",
        "later",
        "lines",
        "lines_measured",
        "ops",
        "outside_backward_ns",
        "outside_ns",
        "own_ns",
        "probed_ops",
        "prober",
        "probes",
        "replay",
        "run_lines",
        "run_ops",
        "run_own_ns",
        "sampler",
        "start_ns",
        "steps",
        "steps_closed",
        "untimed_ns",
        "waits",
        "waits_dropped",
    )

    def __init__(
        self, start_ns: int, keep: int = 64, outside_ns: int = 0, lines_measured: bool = True
    ) -> None:
        self.start_ns = start_ns
        self.last_ns = start_ns
        """When the host's time was last charged (the end of the last op or wait)."""
        self.last_line: object = None
        self.outside_ns = self.outside_backward_ns = outside_ns
        """``outside_backward_ns``: the same for an op of a backward (calibrated apart: autograd
        hands the mode tensors with no Python object yet, and takes the GIL for each op)."""
        self.lines_measured = lines_measured
        self.lines: dict[object, LineTime] = {}
        """The open step's lines, keyed by the line's accumulator (identity: no string per op)."""
        self.own_ns = self.ops = self.untimed_ns = 0
        """``untimed_ns``: the fast path's own time taken out of gaps so far (never reset:
        :func:`profilers.timing.charge.untimed`)."""
        self.waits: deque[HostInterval] = deque(maxlen=MAX_WAITS)
        self.waits_dropped = 0
        self.steps: deque[StepTime] = deque(maxlen=max(1, keep))
        self.steps_closed = 0
        self.run_lines: dict[str, LineTime] = {}
        self.run_own_ns = 0
        self.run_ops = 0
        self.first: StepTime | None = None
        """Step 0 once closed (it is also among :attr:`steps` while kept)."""
        self.later: StepTime | None = None
        """The closed steps after the first, summed (``step``: how many): what a step of the
        loop costs, without what ran before the first step (imports, building the model) that
        step 0 holds, nor the open tail after the last."""
        self.prober: Prober | None = None
        """Measures an op's cost outside the hot path on its own arguments
        (:class:`profilers.counting.calibrate.Prober`), where it is first seen at a line."""
        self.probes: list[list[Any]] = []
        """``[entry, line, ns, counted]`` per probed op at a line (``Prober.settle``)."""
        self.probed_ops = 0
        """Ops whose cost outside the hot path was probed (the rest took ``outside_ns``)."""
        self.replay: OpLog | None = None
        """The step replay's records (:class:`profilers.timing.oplog.OpLog`), where the run
        has GPU times for them (CUDA events, or the model of ``--fake-cuda --gpu``)."""
        self.gaps: list[tuple[int, int, object, object]] = []
        """The open step's long gaps (start, end: on the script's time; the line charged, the
        line of the op before it), to be named by samples."""
        self.sampler: GapSampler | None = None
        """Samples of the profile thread's lines (:class:`profilers.timing.gaps.GapSampler`)."""
        self.gpu: GpuTimeline | None = None
        """The GPU timeline (:class:`profilers.timing.gpu_time.GpuTimeline`) on a GPU with
        CUDA-event timing: each closed step is given its measured GPU half there."""

    def line(self, line: object) -> LineTime:
        """The open step's record of ``line`` (made on its first use in the step)."""
        found = self.lines.get(line)
        if found is None:
            found = self.lines[line] = LineTime()
        return found

    def long_gap(self, end_ns: int, line: object, before: object = None) -> None:
        """The host's time from ``last_ns`` to ``end_ns``, charged to ``line``, was a long gap:
        noted, for the samples of the profile thread's stack to name at the step's close.
        ``before``: what came before it (default: the last op's line, ``last_line``). NB: on the
        script's time (less :attr:`untimed_ns`), as the sampler's readings are."""
        if len(self.gaps) < MAX_GAPS:
            where = self.last_line if before is None else before
            u = self.untimed_ns
            self.gaps.append((self.last_ns - u, end_ns - u, line, where))

    def wait(
        self,
        line: object,
        kind: str,
        cause: str | None,
        enter_ns: int,
        start_ns: int,
        end_ns: int,
        exit_ns: int,
        own_inside_ns: int = 0,
    ) -> LineTime:
        """A wait of the host at ``line`` outside an op's hot path (or an op on the fast path):
        the profiler's wrapper ran from ``enter_ns`` to ``exit_ns``, the wait itself from
        ``start_ns`` to ``end_ns``, of which ``own_inside_ns`` was the profiler's own (its mode
        on the ops an input iterator ran)."""
        own_inside_ns = min(max(own_inside_ns, 0), end_ns - start_ns)
        end_ns -= own_inside_ns  # NB: as if the profiler's part came after the wait
        gap = enter_ns - self.last_ns
        launch_line = line if self.lines_measured else None
        if gap > 0:
            self.line(launch_line).launch_ns += gap
            if gap >= LONG_GAP_NS or launch_line is None:  # NB: the fast path names them all
                self.long_gap(enter_ns, launch_line)
        rec = self.line(line)
        waited = end_ns - start_ns
        self.charge(rec, kind, cause, waited)
        self.own_ns += (start_ns - enter_ns) + (exit_ns - end_ns)
        if kind != LAUNCH:
            self.note_wait(kind, cause, line, start_ns, end_ns)
            if self.replay is not None:
                self.replay.wait(kind, cause, line, enter_ns, start_ns, end_ns, exit_ns)
        self.last_ns = exit_ns
        self.last_line = launch_line
        return rec

    def charge(self, rec: LineTime, kind: str, cause: str | None, ns: int) -> None:
        """Adds ``ns`` of ``kind`` (and, for a sync, of its ``cause``) to ``rec``."""
        if kind == SYNC:
            rec.sync_ns += ns
            key = cause or "other"
            rec.sync_causes[key] = rec.sync_causes.get(key, 0) + ns
        elif kind == COPY:
            rec.copy_ns += ns
        elif kind == INPUT:
            rec.input_ns += ns
        elif kind == COMM:
            rec.comm_ns += ns
        else:
            rec.launch_ns += ns

    def moved(self, line: object, kind: str, cause: str | None, ns: int, start_ns: int) -> None:
        """The op just charged to ``line`` as launch was a wait of ``kind`` (a sync, a
        blocking copy, a collective) that took ``ns`` from ``start_ns``: move its time."""
        rec = self.line(line)
        rec.launch_ns -= ns
        self.charge(rec, kind, cause, ns)
        self.note_wait(kind, cause, line, start_ns, start_ns + ns)

    def note_wait(
        self, kind: str, cause: str | None, line: object, start_ns: int, end: int
    ) -> None:
        if len(self.waits) == MAX_WAITS:
            self.waits_dropped += 1
        key = line if isinstance(line, str) else line_key(line)
        self.waits.append(HostInterval(kind, cause, key, start_ns, end))

    def close(self, now_ns: int, reopen: Callable[[], int] | None = None) -> StepTime:
        """Ends the open step at ``now_ns`` (the host work since the last event goes to the
        last line), keeps it and adds it to the run's sums. ``reopen``: the clock, read once
        closed; the closing is then the profiler's own time, in the next step."""
        gap = now_ns - self.last_ns
        if gap > 0:
            self.line(self.last_line).launch_ns += gap
            if gap >= LONG_GAP_NS or not self.lines_measured:
                self.long_gap(now_ns, self.last_line, STEP_END)
        if self.probes and self.prober is not None:
            self.prober.settle(self)
        named: list[tuple[int, int, str, str]] = []
        lines = self._named(_by_key(self.lines), spans=named)
        self.gaps = []
        if self.sampler is not None:
            self.sampler.forget(now_ns - self.untimed_ns)
        merge_lines(self.run_lines, lines)
        step = StepTime(
            self.steps_closed,
            self.last_step_end(),
            now_ns,
            _costliest(lines),
            self.own_ns,
            self.ops,
            list(self.waits),
            self.waits_dropped,
        )
        self.steps.append(step)
        if self.steps_closed:
            if self.later is None:
                self.later = StepTime(0, step.start_ns, step.start_ns, {}, 0, 0, [])
            self.later.add(step, lines)
        else:
            self.first = step
        if self.gpu is not None:
            self.gpu.closed(step, named)
        if self.replay is not None:
            self.replay.close(self.steps_closed, now_ns)
        self.steps_closed += 1
        self.run_own_ns += self.own_ns
        self.run_ops += self.ops
        self.lines = {}
        self.own_ns = self.ops = self.waits_dropped = 0
        self.waits = deque(maxlen=MAX_WAITS)
        self.last_ns = now_ns if reopen is None else reopen()
        self.own_ns = self.last_ns - now_ns
        return step

    def _named(
        self,
        lines: dict[str, LineTime],
        gaps: list[tuple[int, int, object, object]] | None = None,
        spans: list[tuple[int, int, str, str]] | None = None,
    ) -> dict[str, LineTime]:
        """``lines`` with the long gaps' time moved to the lines sampled in them (``gaps``
        given: a snapshot, which learns nothing; ``spans``: see :func:`name_gaps`)."""
        keyed = [
            (a, b, line_key(s), line_key(p)) for a, b, s, p in (self.gaps if gaps is None else gaps)
        ]
        name_gaps(keyed, self.sampler, lines, LineTime, learn=gaps is None, spans=spans)
        return lines

    def last_step_end(self) -> int:
        return self.steps[-1].end_ns if self.steps else self.start_ns

    def run(self, now_ns: int) -> StepTime:
        """The whole run so far, the open step included (nothing is changed): ``step`` is the
        number of steps closed."""
        lines = {k: v.copy() for k, v in self.run_lines.items()}
        open_lines = _by_key(self.lines)
        tail = now_ns - self.last_ns
        if tail > 0:
            key = line_key(self.last_line)
            open_lines.setdefault(key, LineTime()).launch_ns += tail
        u = self.untimed_ns
        tail_gap = (self.last_ns - u, now_ns - u, self.last_line, STEP_END)
        gaps = self.gaps + ([tail_gap] if tail > 0 else [])
        open_lines = self._named(open_lines, gaps)
        for key, rec in open_lines.items():
            lines.setdefault(key, LineTime()).merge(rec)
        return StepTime(
            self.steps_closed,
            self.start_ns,
            now_ns,
            lines,
            self.run_own_ns + self.own_ns,
            self.run_ops + self.ops,
            [],
        )


def merge_lines(into: dict[str, LineTime], lines: dict[str, LineTime]) -> None:
    """Adds ``lines`` to ``into`` (copies where new)."""
    for key, rec in list(lines.items()):
        found = into.get(key)
        if found is None:
            into[key] = rec.copy()
        else:
            found.merge(rec)


def _by_key(lines: dict[object, LineTime]) -> dict[str, LineTime]:
    """Lines keyed by ``file:line`` (two accumulators of one line, e.g. a borrowed backward
    line, are summed)."""
    out: dict[str, LineTime] = {}
    for line, rec in list(lines.items()):
        key = line_key(line)
        found = out.get(key)
        if found is None:
            out[key] = rec.copy()
        else:
            found.merge(rec)
    return out


def _costliest(lines: dict[str, LineTime]) -> dict[str, LineTime]:
    """The :data:`MAX_LINES` costliest lines, the rest summed as :data:`OTHER_LINES` (a step's
    record stays small however many lines ran)."""
    if len(lines) <= MAX_LINES:
        return lines
    ranked = sorted(lines.items(), key=lambda kv: kv[1].total_ns, reverse=True)
    kept = dict(ranked[: MAX_LINES - 1])
    rest = LineTime()
    for _key, rec in ranked[MAX_LINES - 1 :]:
        rest.merge(rec)
    kept[OTHER_LINES] = rest
    return kept
