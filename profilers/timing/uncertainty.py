"""How sure a prediction is (``--fake-cuda --gpu NAME``): its two parts kept apart, each with a
range.

* **The host's part** is measured on this machine's CPU (named: :func:`cpu_name`), not on the
  machine the GPU would sit in: the script's Python, dispatch and launches, and its input
  waits, per step (:func:`host_ns`). Its range is the spread of the kept steps that ran the same
  ops (:func:`spread`): a loaded machine makes some steps slower than others, and the same
  load makes a whole run slower than the next one.
* **The GPU model's part** is the model's busy time; its range is the model's error measured
  against published step times of that GPU
  (:func:`~profilers.timing.gpu_model.validation.error_of`), or, for a GPU nobody's figures
  were compared with, the widest error seen.

The step's range replays the typical step at both ends at once (:func:`corners`): a fast host
with the GPU at the low end of its error, and a slow one with it at the high end (a step is
never shorter when either part grows). A what-if's saving is not monotone in the parts (a fix
of the host's waits saves most when the GPU is fast): its range is the least and the most it
saves over the four corners and the prediction itself.

Two figures whose ranges overlap cannot be ranked (:func:`tiers`): the report says so
instead of ordering them.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from profilers.timing.gpu_model.validation import ModelError
from profilers.timing.oplog import HOST_NS, KIND, OVERHEAD_NS, WAIT_NS, LoggedStep
from profilers.timing.replay_ops import ReplayOp
from profilers.timing.timeline import INPUT

PERCENTILE_STEPS = 10
"""From this many steps on, the host's range is their 10th to 90th percentile (one step in ten
at either end left out: a garbage collection, a preemption); below it, their minimum to
maximum."""


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This machine's CPU as its vendor names it (``/proc/cpuinfo``'s ``model name`` on Linux,
    else its architecture), with its logical CPU count."""
    name = ""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                name = " ".join(value.split())
                break
    except OSError:
        pass  # no /proc (not Linux): the architecture below names it
    # NB: not platform.processor(): on Linux it starts ``uname -p``
    name = name or f"a {platform.machine() or 'unknown'} CPU"
    count = os.cpu_count()
    return f"{name} ({count} logical CPUs)" if count else name


def host_ns(records: Sequence[Sequence[Any]]) -> int:
    """A step's host part: each op's host time less the profiler's own, and its input waits."""
    total = 0
    for r in records:
        total += max(0, r[HOST_NS] - r[OVERHEAD_NS])
        if r[KIND] == INPUT:
            total += r[WAIT_NS]
    return total


def spread(values: Sequence[float]) -> tuple[float, float, float, str]:
    """``(median, low, high, basis)`` of ``values``: low-high the 10th-90th percentile (nearest
    rank) from :data:`PERCENTILE_STEPS` values on, else the minimum-maximum; ``basis`` says
    which (``p10-p90 of 12 steps``, ``min-max of 3 steps``)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    n = len(ordered)
    mid = float(median(ordered))
    if n >= PERCENTILE_STEPS:
        low = ordered[max(0, math.ceil(0.1 * n) - 1)]
        high = ordered[min(n - 1, math.ceil(0.9 * n) - 1)]
        return mid, float(low), float(high), f"p10-p90 of {n} steps"
    noun = "step" if n == 1 else "steps"
    return mid, float(ordered[0]), float(ordered[-1]), f"min-max of {n} {noun}"


def scaled(ops: Sequence[ReplayOp], host: float, gpu: float) -> list[ReplayOp]:
    """``ops`` with the host's part times ``host`` (each op's host time less the profiler's
    own, input waits) and every GPU time times ``gpu``; the profiler's own time kept as it
    was (a replay without it drops it)."""
    out = []
    for op in ops:
        own = op.host_ns - op.overhead_ns
        wait = round(op.wait_ns * host) if op.kind == INPUT else op.wait_ns
        out.append(
            op.changed(
                host_ns=op.overhead_ns + max(0, round(own * host)),
                gpu_ns=round(op.gpu_ns * gpu),
                wait_ns=wait,
            )
        )
    return out


class Parts:
    """A prediction's parts: the host's per step (``host_ms``: the typical step's, else the
    steps' median; ``host_low``-``host_high``: the factors of their spread over ``basis``)
    and the GPU model's (``gpu_ms`` busy, ``gpu_low``-``gpu_high`` from ``error``): the
    factors that scale a typical step to either end."""

    __slots__ = (
        "basis",
        "error",
        "gpu_high",
        "gpu_low",
        "gpu_ms",
        "host_high",
        "host_low",
        "host_ms",
    )

    def __init__(
        self,
        host_values_ns: Sequence[float],
        gpu_busy_ns: float,
        error: ModelError,
        typical_host_ns: float | None = None,
    ):
        mid, low, high, self.basis = spread(host_values_ns)
        # NB: the typical step's own host part where given (its ops' medians, what the step
        # replays), scaled to the steps' spread: the parts then add up as the step does
        self.host_ms = (mid if typical_host_ns is None else typical_host_ns) / 1e6
        self.host_low = low / mid if mid > 0 else 1.0
        self.host_high = high / mid if mid > 0 else 1.0
        self.error = error
        self.gpu_ms = gpu_busy_ns / 1e6
        # NB: the range holds the model's own figure and the measured error on both sides of
        # it: a model that ran fast against every published figure still predicted this
        self.gpu_low = min(1.0, error.low)
        self.gpu_high = max(1.0, error.high)

    def corners(self) -> list[tuple[float, float]]:
        """(host factor, GPU factor) at the four corners of the two ranges."""
        hosts, gpus = (self.host_low, self.host_high), (self.gpu_low, self.gpu_high)
        return [(h, g) for h in hosts for g in gpus]

    def to_dict(self, cpu: str) -> dict[str, Any]:
        e = self.error
        return {
            "host": {
                "measured_on": cpu,
                "ms": round(self.host_ms, 6),
                "low_ms": round(self.host_ms * self.host_low, 6),
                "high_ms": round(self.host_ms * self.host_high, 6),
                "basis": self.basis,
            },
            "gpu_model": {
                "ms": round(self.gpu_ms, 6),
                "low_ms": round(self.gpu_ms * self.gpu_low, 6),
                "high_ms": round(self.gpu_ms * self.gpu_high, 6),
                "error": [e.low, e.high],
                "validated": e.validated,
                "published_rows": e.rows,
                "words": e.words(),
            },
        }


def ops_host_ns(ops: Sequence[ReplayOp]) -> int:
    """:func:`host_ns` of a step given as ops (the typical step's medians)."""
    return sum(max(0, op.host_ns - op.overhead_ns) + (op.wait_ns if op.kind == INPUT else 0)
               for op in ops)  # fmt: skip


def host_values(group: Sequence[LoggedStep]) -> list[int]:
    """Each step's host part (:func:`host_ns`)."""
    return [host_ns(s.records) for s in group]


def tiers(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Ranks (1-based) of figures listed largest first, each with its range ``(low, high)``:
    figures that cannot be told apart share the rank of the first of them. A new rank starts
    at figure ``i`` only where every figure before it is surely larger than every one from it
    on (the least low end before ``i`` above the greatest high end from ``i``): a range that
    overlaps any figure across the cut keeps them together."""
    n = len(spans)
    least_before = [math.inf] * (n + 1)
    for i, (low, _) in enumerate(spans):
        least_before[i + 1] = min(least_before[i], low)
    most_after = [-math.inf] * (n + 1)
    for i in range(n - 1, -1, -1):
        most_after[i] = max(most_after[i + 1], spans[i][1])
    out: list[int] = []
    for i in range(n):
        cut = i == 0 or least_before[i] > most_after[i]
        out.append(i + 1 if cut else out[-1])
    return out
