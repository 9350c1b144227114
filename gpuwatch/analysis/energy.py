"""Energy per step and per run, from NVML's total-energy counter: the counter's changes (taken by
gpuwatch/monitor/gpu_timeline.py on the profile's clock) joined with the time view's steps
(``report.time``). Pure: no NVML, no torch.

NB: accuracy. Linear interpolation cannot place the power within one of the counter's
intervals, so each end of a step is uncertain by at most the energy of the interval it falls in
(the counter only rises): ``uncertainty_j``. A step shorter than the counter's update interval
(``counter_update_ms``: NVML refreshes it every 20-100 ms on the GPUs we know of; gpuwatch reads
it every ``read_interval_ms``) gets the mean power around it times its length, not its own:
such steps say ``"shorter_than_counter": true``. The counter is also seen late by up to one
read interval. A step's energy is over its wall time as profiled (the profiler's own time
included: the GPU draws power through it too).

Joules while idle need the GPU half of the step (busy and idle time, measured): over the idle
intervals where the step lists its busy spans (``gpu.busy_spans_ms``), else the step's idle share
at the step's mean power (``idle_basis`` says which). Without the GPU half (a CPU run, kernel
timing off) they are not measured, and the report says so rather than guessing.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SOURCE = "NVML total-energy counter"
NOT_SUPPORTED = "not measured: no energy counter (NVML: NotSupported)"
IDLE_NOT_MEASURED = "not measured: the GPU's busy and idle time were not measured in this step"
NOT_COVERED = "not measured: the counter was not read across the whole step"

Point = tuple[float, int]
"""One change of the counter: (ms on the profile's clock, mJ)."""


class Counter:
    """One GPU's counter (mJ since the driver loaded), taken to rise at a steady rate between its
    changes (a reset, when the driver reloads, starts a new segment: no interval spans it)."""

    def __init__(self, points: Sequence[Point]) -> None:
        self.segments: list[tuple[list[float], list[int]]] = []
        for t, mj in sorted(points):
            seg = self.segments[-1] if self.segments else None
            if seg is None or mj < seg[1][-1]:
                self.segments.append(([t], [mj]))
            elif t > seg[0][-1]:
                seg[0].append(t)
                seg[1].append(mj)

    def _at(
        self, seg: tuple[list[float], list[int]], t_ms: float
    ) -> tuple[float, float, int | None]:
        """(interpolated mJ at ``t_ms``, mJ of the interval it falls in, which interval: None
        on a change itself, where the counter is known)."""
        ts, mjs = seg
        i = bisect.bisect_right(ts, t_ms)
        if ts[i - 1] == t_ms:
            return float(mjs[i - 1]), 0.0, None
        t0, t1, e0, e1 = ts[i - 1], ts[i], mjs[i - 1], mjs[i]
        return e0 + (e1 - e0) * (t_ms - t0) / (t1 - t0), float(e1 - e0), i

    def joules(self, a_ms: float, b_ms: float) -> tuple[float, float] | None:
        """(J between ``a_ms`` and ``b_ms``, its uncertainty: the energy of the interval each end
        is in, once for one), None where the changes do not cover both ends in one segment."""
        for seg in self.segments:
            ts = seg[0]
            if ts[0] <= a_ms <= b_ms <= ts[-1]:
                ea, ua, ia = self._at(seg, a_ms)
                eb, ub, ib = self._at(seg, b_ms)
                unc = ua if ia is not None and ia == ib else ua + ub
                return (eb - ea) / 1000.0, unc / 1000.0
        return None

    def update_ms(self) -> float | None:
        """The median time between two changes (the counter's refresh as seen), ms."""
        gaps = [b - a for ts, _ in self.segments for a, b in zip(ts, ts[1:], strict=False)]
        return statistics.median(gaps) if gaps else None


def _idle_spans(step: dict[str, Any]) -> list[tuple[float, float]] | None:
    """The step's idle intervals (ms on the profile's clock), from its busy spans."""
    spans = (step.get("gpu") or {}).get("busy_spans_ms")
    if spans is None:
        return None
    t, end, out = float(step["start_ms"]), float(step["end_ms"]), []
    for a, b in sorted((float(a), float(b)) for a, b in spans):
        if a > t:
            out.append((t, min(a, end)))
        t = max(t, b)
    if end > t:
        out.append((t, end))
    return out


def _sum(counters: Mapping[int, Counter], spans: Iterable[tuple[float, float]]) -> float | None:
    total = 0.0
    for a, b in spans:
        for c in counters.values():
            got = c.joules(a, b)
            if got is None:
                return None
            total += got[0]
    return total


def step_energy(
    step: dict[str, Any], counters: Mapping[int, Counter], update_ms: float | None
) -> dict[str, Any]:
    """A step's ``energy``: joules on the GPUs of ``counters``, uncertainty, per GPU, idle."""
    a, b = float(step["start_ms"]), float(step["end_ms"])
    by_gpu: dict[str, float] = {}
    uncertainty = 0.0
    for gpu, c in sorted(counters.items()):
        got = c.joules(a, b)
        if got is None:
            return {"j": None, "note": NOT_COVERED}
        by_gpu[str(gpu)] = round(got[0], 3)
        uncertainty += got[1]
    j = sum(by_gpu.values())
    out: dict[str, Any] = {
        "j": round(j, 3),
        "uncertainty_j": round(uncertainty, 3),
        "by_gpu_j": by_gpu,
        "shorter_than_counter": update_ms is not None and b - a < update_ms,
    }
    half = step.get("gpu")
    if not half or half.get("measured") != "measured":
        out.update(idle_j=None, idle_basis=IDLE_NOT_MEASURED)
        return out
    spans = _idle_spans(step)
    idle = _sum(counters, spans) if spans is not None else None
    if idle is not None:
        out.update(idle_j=round(idle, 3), idle_basis="interpolated over the idle intervals")
    else:
        wall = b - a
        share = float(half["idle_total_ms"]) / wall if wall > 0 else 0.0
        out.update(idle_j=round(j * share, 3), idle_basis="the step's idle share at its mean power")
    return out


def with_energy(
    view: Mapping[str, Any],
    points: Mapping[int, Sequence[Point]],
    gpus: Iterable[int],
    read_interval_ms: float,
    scope: str | None = None,
) -> dict[str, Any]:
    """The time view (``report.time``) with ``energy`` added to the run and to each kept step,
    for the GPUs ``gpus`` (those the script used) from their counter changes ``points`` (ms on
    the profile's clock); ``view`` itself is left as it was. ``scope``: said when which GPUs
    were used is unknown."""
    time = {**view, "steps": [dict(step) for step in view.get("steps", [])]}
    used = sorted(set(gpus))
    counters = {g: Counter(points[g]) for g in used if points.get(g)}
    missing = {str(g): NOT_SUPPORTED for g in used if not points.get(g)}
    updates = [u for c in counters.values() if (u := c.update_ms()) is not None]
    update_ms = max(updates) if updates else None
    run: dict[str, Any] = {
        "source": SOURCE,
        "gpus": used,
        "not_measured": missing,
        "read_interval_ms": read_interval_ms,
        "counter_update_ms": None if update_ms is None else round(update_ms, 3),
    }
    if scope:
        run["scope"] = scope
    steps = time.get("steps", [])
    if not counters:
        run["run_j"] = None
        for step in steps:
            step["energy"] = {"j": None, "note": NOT_SUPPORTED}
        time["energy"] = run
        return time
    for step in steps:
        step["energy"] = step_energy(step, counters, update_ms)
    wall = float(time["run"]["wall_ms"])
    got = [c.joules(0.0, wall) for c in counters.values()]
    run["run_j"] = None if None in got else round(sum(g[0] for g in got if g), 3)
    kept = [s["energy"]["j"] for s in steps if s["energy"].get("j") is not None]
    run["step_j_median"] = round(statistics.median(kept), 3) if kept else None
    idle = [s["energy"]["idle_j"] for s in steps if s["energy"].get("idle_j") is not None]
    run["steps_idle_j"] = round(sum(idle), 3) if idle else None
    run["steps_measured"] = len(kept)
    time["energy"] = run
    return time


def points_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[int, list[Point]]:
    """The counter's changes in GPU sample rows (``t`` in s, ``energy_total_mj``), ms: the
    ``--live`` view's samples, taken at the stats' interval."""
    out: dict[int, list[Point]] = {}
    for row in rows:
        mj = row.get("energy_total_mj")
        if mj is None:
            continue
        points = out.setdefault(int(row["gpu"]), [])
        if not points or points[-1][1] != mj:
            points.append((float(row["t"]) * 1000.0, int(mj)))
    return out


def rows_energy(
    rows: Iterable[Mapping[str, Any]], gpus: Iterable[int], a_ms: float, b_ms: float
) -> tuple[float, bool] | None:
    """(J on ``gpus`` between ``a_ms`` and ``b_ms`` from sample rows, whether the span is shorter
    than their gap: the mean power times its length), None where rows or a counter miss it."""
    points = points_from_rows(rows)
    total, short = 0.0, False
    for gpu in gpus:
        c = Counter(points.get(gpu, []))
        got = c.joules(a_ms, b_ms) if c.segments else None
        if got is None:
            return None
        total += got[0]
        gap = c.update_ms()
        short = short or (gap is not None and b_ms - a_ms < gap)
    return total, short


def rows_read_interval_ms(rows: Sequence[Mapping[str, Any]]) -> float:
    """How often GPU sample rows were taken (the median gap between their times), ms."""
    ts = sorted({float(r["t"]) for r in rows})
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    return round(statistics.median(gaps) * 1000, 3) if gaps else 0.0
