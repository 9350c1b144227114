"""Shares, verdicts and the report's ``time`` section (plain data: no torch, so a saved report's
renderers use it too).

A step's figures are over its wall time less the profiler's own time: the step as it would have
run unprofiled (``wall_unprofiled_ms``). On the host the causes split that whole; on a GPU, busy
time and the idle time by cause split it (:mod:`profilers.timing.idle`), measured with CUDA
events (:mod:`profilers.timing.gpu_time`). The **verdict** is the largest share: ``GPU-bound``
when busy time is, else the cause of the largest part.

NB honest time on a GPU: the profiler's own host time makes the GPU wait longer only where the
GPU waits for launches (with work queued, it is hidden behind it), so at most the step's own
time comes off the measured ``launch`` idle for the verdict (``gpu_profiler_ms``); the measured
figures themselves stay as measured.
"""

from __future__ import annotations

from collections.abc import Mapping

from profilers.sections import Breakdown, GraphBlocker, LineCost, TimeView, Wait
from profilers.timing.line_time import LineTime
from profilers.timing.timeline import CAUSES, COMM, COPY, INPUT, LAUNCH, SYNC, StepClock, StepTime

VERDICTS = {
    "input": "input-bound",
    "sync": "sync-bound",
    "copy": "copy-bound",
    "comm": "comm-bound",
    "launch": "launch-bound",
    "dependency": "dependency-bound",
    "busy": "GPU-bound",
}
"""Cause (or ``busy``) -> the verdict it gives when it is the largest share."""

MEASURED = "measured"

HOST_BOUND = "host-bound"
"""The verdict of a run with no GPU work whose host's own work (Python, ops on the CPU) is the
largest share: nothing was launched, so never ``launch-bound``."""

RUN_LINES = 30
"""Lines listed for the run (the costliest)."""

FIRST_LINES = 5
"""Lines listed for step 0 (``first_step``: what ran before the first step, mostly)."""


def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def verdict_of(parts_ms: dict[str, float]) -> tuple[str, dict[str, float]]:
    """The verdict and the shares (percent of their sum) of ``parts_ms`` (cause or ``busy`` ->
    ms); ``"idle"``... never: an empty or all-zero split gives ``"none"``."""
    total = sum(max(0.0, v) for v in parts_ms.values())
    if total <= 0:
        return "none", {k: 0.0 for k in parts_ms}
    shares = {k: round(100.0 * max(0.0, v) / total, 2) for k, v in parts_ms.items()}
    top = max(parts_ms, key=lambda k: parts_ms[k])
    return VERDICTS.get(top, top), shares


def line_cost(key: str, rec: LineTime) -> LineCost:
    """One line's host time by cause (ms), with its sync causes and graph-capture counts."""
    causes = {c: _ms(ns) for c, ns in sorted(rec.sync_causes.items())} or None
    return LineCost(
        key, _ms(rec.total_ns), _ms(rec.ns(INPUT)), _ms(rec.ns(SYNC)), _ms(rec.ns(COPY)),
        _ms(rec.ns(COMM)), _ms(rec.ns(LAUNCH)), causes, rec.syncs, rec.host_reads, rec.pageable
    )  # fmt: skip


def graph_blockers(lines: dict[str, LineTime]) -> list[GraphBlocker]:
    """What stops the step being captured as a CUDA graph: each line with a sync, a read back
    to the host or a pageable copy inside it (a capture fails on each)."""
    found = [(key, r) for key, r in lines.items() if r.syncs or r.host_reads or r.pageable]
    found.sort(key=lambda kv: (kv[1].syncs + kv[1].pageable, kv[0]), reverse=True)
    return [GraphBlocker(key, r.syncs, r.host_reads, r.pageable) for key, r in found]


def gpu_parts(gpu: Mapping[str, object]) -> dict[str, float]:
    """A GPU half's busy time and idle time by cause (ms), for :func:`verdict_of`."""
    busy, idle = gpu["busy_ms"], gpu["idle_ms"]
    assert isinstance(busy, int | float) and isinstance(idle, dict)
    return {"busy": float(busy), **{k: float(v) for k, v in idle.items()}}


def breakdown(
    step: StepTime,
    gpu: dict[str, object] | None = None,
    max_lines: int = RUN_LINES,
    origin_ns: int | None = None,
    pending: bool = False,
) -> Breakdown:
    """A step's (or the run's) figures. ``gpu``: busy and idle by cause from
    :func:`profilers.timing.idle.charge`, None where not measured. With ``origin_ns`` (the
    profile's start), a closed step's: its number, bounds (ms since then) and waits (the
    newest, each an interval on the same clock); ``pending``: its GPU figures are still to
    come (its CUDA events have not completed yet)."""
    host = dict.fromkeys(CAUSES, 0)
    items = list(step.lines.items())  # NB: a checkpoint's thread may read it while it grows
    for _key, rec in items:
        for cause in CAUSES:
            host[cause] += rec.ns(cause)
    taken = 0.0
    if gpu is not None:
        parts = gpu_parts(gpu)
        if gpu.get("measured") == MEASURED:
            taken = min(step.own_ns / 1e6, parts.get(LAUNCH, 0.0))
            parts[LAUNCH] = parts.get(LAUNCH, 0.0) - taken
    else:
        parts = {cause: ns / 1e6 for cause, ns in host.items()}
    verdict, shares = verdict_of(parts)
    ranked = sorted(items, key=lambda kv: kv[1].total_ns, reverse=True)
    closed = origin_ns is not None
    o = origin_ns or 0
    waits = [Wait(w.kind, w.cause, w.line, _ms(w.start_ns - o), _ms(w.end_ns - w.start_ns))
             for w in step.waits]  # fmt: skip
    return Breakdown(
        step=step.step if closed else None,
        start_ms=_ms(step.start_ns - o) if closed else None,
        end_ms=_ms(step.end_ns - o) if closed else None,
        measured=MEASURED,
        wall_ms=_ms(step.wall_ns),
        own_ms=_ms(step.own_ns),
        wall_unprofiled_ms=_ms(step.wall_ns - step.own_ns),
        ops=step.ops,
        host_ms={cause: _ms(ns) for cause, ns in host.items()},
        gpu=gpu,
        verdict=verdict,
        shares_pct=shares,
        lines=[line_cost(k, r) for k, r in ranked[:max_lines]],
        gpu_profiler_ms=round(taken, 6) if taken else None,
        graph_blockers=graph_blockers(dict(items)) if verdict == "launch-bound" else None,
        waits=waits if closed else None,
        waits_dropped=step.waits_dropped if closed else None,
        gpu_pending=True if pending else None,
    )


def step_dict(
    step: StepTime, origin_ns: int, gpu: dict[str, object] | None = None, pending: bool = False
) -> Breakdown:
    """A closed step's :func:`breakdown`: every line, its bounds and waits."""
    return breakdown(step, gpu, len(step.lines), origin_ns, pending)


GPU_MEASURED = (
    "measured: CUDA events, each op placed on the host's clock (busy: the union of the ops on "
    "all of a GPU's streams; idle: the rest of the step, charged to its cause and line)"
)

GPU_NOT_MEASURED = "not measured: no GPU timeline in this run (the host half is measured)"


def time_section(
    clock: StepClock, now_ns: int, gpu_note: str = GPU_NOT_MEASURED, gpu_work: bool = True
) -> TimeView:
    """The report's ``time`` section: the run (open step included) and the kept steps, with
    their measured GPU half where the run has a GPU timeline (``clock.gpu``). ``gpu_work``:
    whether anything ran on a GPU (else host work is no launch: :data:`HOST_BOUND`)."""
    steps = list(clock.steps)
    line = clock.gpu
    later = first = None  # the per-step figures: step 0 holds the setup before it, apart
    if line is None or not line.anchors:  # no op ran on a GPU: nothing measured there
        run = breakdown(clock.run(now_ns))
        kept = [step_dict(s, clock.start_ns) for s in steps]
        if clock.later is not None and clock.first is not None:
            later = breakdown(clock.later).replace(steps=clock.later.step)
            first = breakdown(clock.first, max_lines=FIRST_LINES)
    else:
        settled = bool(line.settled)
        gpu_note = GPU_MEASURED
        if not settled:
            gpu_note += "; the newest steps' figures are still to come (events not complete)"
        run = breakdown(clock.run(now_ns), line.run(now_ns, list(clock.waits), settled))
        done = line.steps_charged
        kept = [
            step_dict(s, clock.start_ns, line.results.get(s.step), pending=s.step >= done)
            for s in steps
        ]
        charged = line.later()
        if charged is not None and clock.first is not None:
            # NB: the steps whose GPU half has come, host and GPU alike (none yet: the run)
            later = breakdown(*charged).replace(steps=charged[0].step)
            first = breakdown(clock.first, line.first_result, max_lines=FIRST_LINES)
    if not gpu_work:
        run, kept = _host_bound(run), [_host_bound(d) for d in kept]
        if later is not None and first is not None:
            later, first = _host_bound(later), _host_bound(first)
    return TimeView(
        gpu=gpu_note,
        lines_measured=clock.lines_measured,
        outside_ns_per_op=clock.outside_ns,
        steps_closed=clock.steps_closed,
        steps_kept=len(steps),
        run=run,
        after_first=later,
        first_step=first,
        steps=kept,
    )


def _host_bound(d: Breakdown) -> Breakdown:
    """``d`` as no GPU work gives it: the host's own work is no launch."""
    if d.verdict != VERDICTS[LAUNCH]:
        return d
    return d.replace(verdict=HOST_BOUND, graph_blockers=None)


def per_step(t: TimeView, after_first: bool = True) -> tuple[Breakdown, int]:
    """The breakdown a report's per-step figures come from, and the steps it holds: the
    steps after the first (``after_first``) where two or more closed, as step 0 also holds
    what ran before it (imports, building the model) and no step holds the open tail after
    the last; else the run (0 steps: no step ended, its figures are for the whole run). NB
    GPU figures predicted for a typical step (``--fake-cuda --gpu``, ``gpu.per_step``) are
    per step already. ``after_first=False``: the run (to compare with an older report, which
    has no ``after_first``)."""
    after = t.after_first if after_first else None
    if after is not None and (after.steps or 0) > 0:
        return after, int(after.steps or 0)
    return t.run, t.steps_closed


def last_step(clock: StepClock | None) -> dict[str, object]:
    """The live view's line: the newest closed step's verdict and shares (cheap: one step).
    With a GPU timeline, the newest step whose GPU half has come (a step or so behind), its
    figures measured on the GPU; the newest step's host figures until the first has."""
    if clock is None or not clock.steps:
        return {}
    step, gpu = clock.steps[-1], None
    line = clock.gpu
    if line is not None:
        for s in reversed(clock.steps):
            gpu = line.brief(s.step)
            if gpu is not None:
                step = s
                break
    d = breakdown(step, gpu, max_lines=0)
    out: dict[str, object] = {
        "step": step.step,
        "verdict": d.verdict,
        "shares_pct": d.shares_pct,
        "wall_unprofiled_ms": d.wall_unprofiled_ms,
        # its bounds on the profile's clock: the live view joins its GPU samples with them
        "start_ms": _ms(step.start_ns - clock.start_ns),
        "end_ms": _ms(step.end_ns - clock.start_ns),
    }
    if gpu is not None:
        out["gpu"] = gpu
    return out
