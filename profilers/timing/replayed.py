"""The report's replayed figures: each kept step replayed from its records
(:mod:`profilers.timing.oplog`), and ``what_if``: every fix the representative step allows,
ranked (:func:`profilers.timing.whatif.rank`). Under ``--fake-cuda --gpu NAME`` they are
``predicted`` (the model's GPU times, never mixed with the host's measured figures); on a GPU
``replayed`` (measured CUDA-event times).
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack
from statistics import mean, median
from typing import Any

from profilers.errors import MeasuredNotPredicted
from profilers.sections import Breakdown, TimeView
from profilers.timing import fake_time as _fake_time
from profilers.timing.gpu_model.rates import memory_check
from profilers.timing.gpu_model.specs import GpuSpec, gpu_spec
from profilers.timing.gpu_model.validation import error_of
from profilers.timing.idle import follow_named
from profilers.timing.line_time import LineTime
from profilers.timing.oplog import HOST_NS, KIND, OVERHEAD_NS, SITE, WAIT_NS, LoggedStep, OpLog
from profilers.timing.replay import ReplayOp, ReplayResult, replay
from profilers.timing.replay_ops import HOST
from profilers.timing.timeline import COMM, INPUT, StepClock
from profilers.timing.uncertainty import (
    Parts,
    cpu_name,
    host_values,
    ops_host_ns,
    scaled,
    tiers,
)
from profilers.timing.verdict import gpu_parts, time_section, verdict_of
from profilers.timing.whatif import DECIDES, HINT_WHATIFS, Ranking, rank

PREDICTED = "predicted"
REPLAYED = "replayed"

EVERY = 10
"""A deferred sync's what-if: the value read once per this many steps."""

FACTORY_OPS = ("lift_fresh", "tensor", "scalar_tensor", "arange", "zeros", "ones", "full")
"""Ops that make a tensor from host data or a fill: a line that runs one and copies to a GPU
could make the tensor there instead (the ``created_on_cpu`` hint's test, in the library)."""


def simulated_gpus() -> Any:
    """``--fake-cuda``'s harness when it is on (without importing it when it is not)."""
    fake = sys.modules.get("profilers.fake_cuda.harness")
    return None if fake is None else getattr(fake, "HARNESS", None)


def time_view_on(gpu: str | None) -> bool:
    """Whether the time view can be on: not under ``--fake-cuda`` unless a model of a GPU
    (``gpu``) predicts the steps. NB: on a fake GPU each op's host time is mostly the
    simulation's own work: charged to the user's lines it would make every step
    "launch-bound" (honest time: never); the replay leaves that work out.

    Raises:
        MeasuredNotPredicted: ``gpu`` given on real GPUs (the run is measured there).
    """
    if simulated_gpus() is None:
        if gpu is not None:
            raise MeasuredNotPredicted(gpu)
        return True
    return gpu is not None


def start_log(
    stack: ExitStack, recorder: Any, clock: Any, gpu: str | None, what_if: bool = False
) -> OpLog | None:
    """The step replay's records for a profile whose step clock is ``clock``: under
    ``--fake-cuda`` with ``gpu`` (a name: the model's GPU, whose predicted time view is the
    replay's), or on a GPU with CUDA-event timing where the run asked for ``what_if``; None
    otherwise (no replay asked for, or no GPU times to replay), and the hot path then makes no
    record at all (profilers/counting/dispatch.py)."""
    spec = gpu_spec(gpu) if gpu is not None else None
    if spec is None and not (what_if and recorder.cuda_timing):
        return None
    log = OpLog(clock.outside_ns, spec)
    log.outside_backward_ns = clock.outside_backward_ns
    log.in_backward = lambda: recorder.backward_line is not None
    log.harness = simulated_gpus()
    log.clock, log.clock_thread = clock, threading.get_ident()
    clock.replay = recorder.replay = log
    if spec is not None:
        _fake_time.calibrate_fake_entry(log)
        _fake_time.ACTIVE = log

        def off() -> None:
            _fake_time.ACTIVE = None

        stack.callback(off)
    return log


def _group(steps: list[LoggedStep]) -> list[LoggedStep]:
    """Of the kept steps after the first (which pays for the run's start: the model moved, the
    allocator grown), those that ran the same ops from the same lines (the largest such group;
    the newest on a tie), oldest first; empty without a step with records."""
    whole = [s for s in steps if s.records and s.step > 0] or [s for s in steps if s.records]
    if not whole:
        return []
    groups: dict[tuple[Any, ...], list[LoggedStep]] = {}
    for s in whole:
        shape = tuple((r[KIND], id(r[SITE]) if not isinstance(r[SITE], str) else r[SITE])
                      for r in s.records)  # fmt: skip
        groups.setdefault(shape, []).append(s)
    return max(groups.values(), key=lambda g: (len(g), g[-1].step))


def typical(steps: list[LoggedStep]) -> tuple[LoggedStep, list[ReplayOp], int] | None:
    """The step the what-ifs are worked out on, as ops: the steps of :func:`_group`, each op's
    host time the median of theirs. NB: a shared machine preempts the host now and then (and
    the garbage collector runs): one step's host times carry those pauses, the median over
    steps does not. Returns the newest such step, its ops with the median host times, and how
    many steps the medians are over."""
    best = _group(steps)
    if not best:
        return None
    newest = best[-1]
    ops = newest.ops()
    if len(best) > 1:
        for i, op in enumerate(ops):
            op.host_ns = int(median(s.records[i][HOST_NS] for s in best))
            op.overhead_ns = min(op.host_ns, int(median(s.records[i][OVERHEAD_NS] for s in best)))
            if op.kind in (INPUT, COMM):
                # NB: the mean: a loader with workers that keeps pace only now and then makes
                # the host wait every other step (8.8, 0.2, 7.2, 0.2 ms): its median, or the
                # newest step's, said it never held the loop up
                op.wait_ns = int(mean(s.records[i][WAIT_NS] for s in best))
    return newest, ops, len(best)


def _gpu_dict(
    result: ReplayResult, measured: str, gpu: str | None, lines: dict[str, LineTime], over: int = 1
) -> dict[str, object]:
    """A replay's figures (one step's); its launch idle split as the host's stack sampler
    split the host work of ``lines`` (summed over ``over`` steps)."""
    d = result.to_dict(measured)
    d["idle_lines"] = follow_named(d["idle_lines"], lines, over)
    d["per_step"] = True
    if gpu is not None:
        d["gpu"] = gpu
    return d


def _with_gpu(step: Breakdown, gpu: dict[str, object]) -> Breakdown:
    """A breakdown given replayed GPU figures: its verdict and shares are theirs."""
    verdict, shares = verdict_of(gpu_parts(gpu))
    return step.replace(gpu=gpu, verdict=verdict, shares_pct=shares, graph_blockers=None)


def sections(
    clock: StepClock | None, now_ns: int, log: OpLog | None, lines: list[Any]
) -> tuple[TimeView | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The report's ``time`` (None: not measured), ``predicted`` and ``what_if`` sections."""
    gpu_work = log is not None and log.gpu is not None or _cuda_initialized()
    time = time_section(clock, now_ns, gpu_work=gpu_work) if clock is not None else None
    time, predicted, what = apply(time, log, lines)
    if log is not None and log.gpu is not None and time is not None:
        if not _predicted_step(time.run):
            # NB: no step to predict: the host's own time under the fake GPU is mostly the
            # simulation's work, never to be charged to the user's lines (honest time)
            time = None
        else:  # only the steps the model replayed: the others' time is the simulation's
            steps = [d for d in time.steps if _predicted_step(d)]
            time = time.replace(steps=steps, steps_kept=len(steps))
    return time, predicted, what


def _cuda_initialized() -> bool:
    """Whether this process used a GPU: CUDA starts on the first GPU tensor or call that needs
    it (``is_available()`` and ``device_count()`` do not start it)."""
    import torch

    try:
        return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    except Exception:  # NB: a build whose CUDA cannot even say: nothing ran there
        return False


def _named_lines(
    clock: StepClock | None,
) -> tuple[dict[int, dict[str, LineTime]], dict[str, LineTime], int]:
    """The host's lines, with what the stack sampler named out of each (``named_out``), for
    the replayed GPU idle to follow: per kept step; and over the steps after the first (else
    the run), with how many steps those sum."""
    if clock is None:
        return {}, {}, 1
    per_step = {t.step: t.lines for t in clock.steps}
    if clock.later is not None:
        return per_step, clock.later.lines, clock.later.step
    return per_step, clock.run_lines, max(1, clock.steps_closed)


def _predicted_step(d: Breakdown) -> bool:
    return d.gpu is not None and d.gpu.get("measured") == PREDICTED


def apply(
    time: TimeView | None, log: OpLog | None, lines: list[Any]
) -> tuple[TimeView | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The time view, its steps given their predicted GPU figures (under ``--fake-cuda
    --gpu``), the report's ``predicted`` section and ``what_if`` from ``log``."""
    if log is None:
        return time, None, None
    gpu = log.gpu.name if log.gpu is not None else None
    measured = PREDICTED if gpu is not None else REPLAYED
    steps = [s for s in list(log.steps) if s.records]
    predicted = _predicted(log.gpu, log.harness) if log.gpu is not None else None
    chosen = typical(steps)
    parts = None
    if log.gpu is not None and predicted is not None and chosen is not None:
        parts = _parts(_group(steps), chosen[1], log.gpu)
        predicted.update(_prediction(parts, chosen[1]))
    if gpu is not None and time is not None and chosen is not None:
        host, named, over = _named_lines(log.clock)
        kept = []
        for d in time.steps:
            found = next((s for s in steps if s.step == d.step), None)
            if found is not None:
                result = replay(found.ops(), drop_overhead=True)
                d = _with_gpu(d, _gpu_dict(result, measured, gpu, host.get(found.step, {})))
            kept.append(d)
        run = _gpu_dict(replay(chosen[1], drop_overhead=True), measured, gpu, named, over)
        run["steps_median"] = chosen[2]
        after = time.after_first  # the per-step figures' basis: a typical step too
        time = time.replace(
            steps=kept,
            run=_with_gpu(time.run, run),
            after_first=None if after is None else _with_gpu(after, run),
            gpu=f"PREDICTED for {gpu} (--fake-cuda --gpu): the GPU's times come from a model "
            f"of it, replayed from the newest {len(steps)} steps' records (the run's figures: "
            f"a typical step, each op's host time the median over {chosen[2]} steps); the "
            "host's own figures are measured (with the simulation's own work in them)",
        )
    if chosen is None:
        return time, predicted, None
    return time, predicted, what_if(*chosen, log.gpu, measured, lines, parts)


def _parts(group: list[LoggedStep], ops: list[ReplayOp], spec: GpuSpec) -> Parts:
    """The typical step's parts: the host's over the steps of its group, the GPU model's busy
    time with the model's error for ``spec``."""
    busy = replay(ops, drop_overhead=True).busy_ns
    return Parts(host_values(group) or [0], busy, error_of(spec.name), ops_host_ns(ops))


def _prediction(parts: Parts, ops: list[ReplayOp]) -> dict[str, Any]:
    """The ``predicted`` section's parts and the step's range: the typical step replayed with
    both parts at their low ends, and at their high ends; ``verdicts``: the step's verdict,
    then any other it gets at a corner of the two ranges (the verdict is not known where
    there are several)."""
    ends = [
        replay(scaled(ops, h, g), drop_overhead=True).step_ns
        for h, g in ((parts.host_low, parts.gpu_low), (parts.host_high, parts.gpu_high))
    ]
    out = parts.to_dict(cpu_name())
    nominal = replay(ops, drop_overhead=True)
    verdicts = [_verdict(nominal)]
    for h, g in parts.corners():
        found = _verdict(replay(scaled(ops, h, g), drop_overhead=True))
        if found not in verdicts:
            verdicts.append(found)
    out["step"] = {
        "ms": round(nominal.step_ns / 1e6, 6),
        "low_ms": round(ends[0] / 1e6, 6),
        "high_ms": round(ends[1] / 1e6, 6),
        "verdicts": verdicts,
    }
    return out


def _verdict(result: ReplayResult) -> str:
    """A replayed step's verdict, as the time view gives it (:func:`verdict_of`)."""
    d = result.to_dict()
    return verdict_of({"busy": d["busy_ms"], **d["idle_ms"]})[0]


def _made_on_host(lines: list[Any]) -> set[str]:
    """Lines that copy to a GPU a tensor made on the host by a factory (``torch.randn``,
    ``torch.tensor``), at that line or another (the copies' ``origins``)."""
    out = set()
    for s in lines:
        made = "factory" in getattr(s, "origins", {})
        if s.h2d.count and (made or any(op.startswith(FACTORY_OPS) for op in s.op_breakdown)):
            out.add(f"{s.file}:{s.line}")
    return out


def what_if(
    step: LoggedStep,
    ops: list[ReplayOp],
    over: int,
    spec: GpuSpec | None,
    measured: str,
    lines: list[Any],
    parts: Parts | None = None,
) -> dict[str, Any]:
    """The report's ``what_if``: the ``step`` (``ops``: its host times the medians ``over``
    that many steps) as recorded and unprofiled, and every fix's saving; with the prediction's
    ``parts``, each saving's range and whether it can be ranked (:func:`_ranges`)."""
    as_recorded = replay(ops).step_ns
    on_device = _made_on_host(lines)
    decides = {f"{s.file}:{s.line}" for s in lines if DECIDES.match(getattr(s, "source", ""))}
    ranking = rank(ops, gpu=spec, every=EVERY, on_device=on_device, decides=decides)
    hint_kinds: dict[str, list[str]] = {}
    for hint, kind in HINT_WHATIFS.items():
        hint_kinds.setdefault(kind, []).append(hint)
    base = ranking.base_ns
    # NB: the sum over the fixes applied together: two fixes of one copy (pinned, bfloat16)
    # are alternatives, the better one counts (Ranking.sum_ns adds both)
    together = {id(w) for w in ranking.combined}
    summed = sum(s.saving_ns for s in ranking.savings if id(s.whatif) in together)
    out = {
        "measured": measured,
        "gpu": spec.name if spec is not None else None,
        "step": step.step,
        "steps_median": over,
        "ops": sum(1 for o in ops if o.kind != HOST),  # NB: not the step's closing host time
        "ops_dropped": step.dropped,
        "every": EVERY,
        "as_recorded_ms": round(as_recorded / 1e6, 6),
        "unprofiled_ms": round(base / 1e6, 6),
        "savings": [
            {
                "kind": s.whatif.kind,
                "site": s.whatif.line,
                "fix": s.whatif.describe(),
                "hints": hint_kinds.get(s.whatif.kind, []),
                "saving_ms": round(s.saving_ns / 1e6, 6),
                "share_pct": round(100 * s.share, 2),
                "new_ms": round(s.new_ns / 1e6, 6),
                "ops": s.ops,
                "together": id(s.whatif) in together,
            }
            for s in ranking.savings
        ],
        "sum_ms": round(summed / 1e6, 6),
        "combined_ms": round(ranking.combined_ns / 1e6, 6),
        "combined_pct": round(100 * ranking.combined_ns / base, 2) if base > 0 else 0.0,
        "interaction_ms": round((summed - ranking.combined_ns) / 1e6, 6),
    }
    if parts is not None:
        _ranges(out, ranking, ops, parts, spec, on_device, decides)
    return out


def _ranges(
    out: dict[str, Any],
    ranking: Ranking,
    ops: list[ReplayOp],
    parts: Parts,
    spec: GpuSpec | None,
    on_device: set[str],
    decides: set[str],
) -> None:
    """Each saving's range over the prediction's four corners (the host's part and the GPU
    model's at either end of their ranges, :mod:`profilers.timing.uncertainty`) and the
    prediction itself; its ``rank`` (shared by savings that cannot be told apart:
    :func:`~profilers.timing.uncertainty.tiers`), ``ranked`` false where it shares it; and
    the unprofiled step's range."""
    found: dict[tuple[str, str | None], list[float]] = {}
    for s in ranking.savings:
        found[(s.whatif.kind, s.whatif.line)] = [s.saving_ns]
    bases = [ranking.base_ns]
    for h, g in parts.corners():
        corner = rank(
            scaled(ops, h, g), gpu=spec, every=EVERY, on_device=on_device, decides=decides
        )
        bases.append(corner.base_ns)
        for s in corner.savings:
            found.setdefault((s.whatif.kind, s.whatif.line), []).append(s.saving_ns)
    out["unprofiled_low_ms"] = round(min(bases) / 1e6, 6)
    out["unprofiled_high_ms"] = round(max(bases) / 1e6, 6)
    rows = out["savings"]
    spans = []
    for row in rows:
        values = found.get((row["kind"], row["site"]), [row["saving_ms"] * 1e6])
        row["saving_low_ms"] = round(min(values) / 1e6, 6)
        row["saving_high_ms"] = round(max(values) / 1e6, 6)
        spans.append((row["saving_low_ms"], row["saving_high_ms"]))
    for row, place in zip(rows, tiers(spans), strict=True):
        row["rank"] = place
    for row in rows:
        row["ranked"] = sum(1 for r in rows if r["rank"] == row["rank"]) == 1
    out["ranked"] = all(row["ranked"] for row in rows)


def _predicted(spec: GpuSpec, harness: Any) -> dict[str, Any]:
    """The report's ``predicted``: the GPU, and whether the run's peak of GPU memory (as the
    fake GPU counted it) fits in it."""
    out: dict[str, Any] = {"gpu": spec.name, "source": spec.source}
    if harness is not None:
        peak = max(harness.memory.peak, default=0)
        out["memory"] = {
            "peak_bytes": int(peak),
            "gpu_bytes": spec.memory_bytes,
            "fits": peak <= spec.memory_bytes,
            "message": memory_check(spec, peak),
        }
    return out
