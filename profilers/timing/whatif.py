"""What each fix would save: a step replayed with one fix applied, against the step as it ran.
One what-if per kind of hint; each changes the ops of one line (``line``; None:
every line it applies to), never the recording.

* :data:`DEFER_SYNC` (hints ``item_in_loop``, ``log_every_step``, ``d2h_in_loop``,
  ``data_dependent``): the value is read once per ``every`` steps (0: never; the sync is
  gone). The line's Python still runs every step; a read to the host (a ``d2h`` with a sync)
  happens in the last step of each group only, a sync made by a kernel (``nonzero``) is taken
  off it. Replayed over ``every`` chained steps, the saving is per step.
* :data:`PINNED` (``blocking_h2d``, ``non_blocking_pageable``, the loader's and pinned copies):
  copies from pinned memory with ``non_blocking=True``: the host no longer waits; with a GPU
  model, a pageable copy's time scales by its pinned/pageable ratio (else kept: conservative).
* :data:`ON_DEVICE` (``created_on_cpu``): the tensor is made on the device: the host-to-device
  copy becomes a kernel that writes its bytes (the model's fill time; else the shortest kernel).
* :data:`OVERLAP_INPUT` (an input-bound step): the loader prepares the next batch while the
  step runs (``workers`` loader processes, prefetching): the host waits only for what the rest
  of the step did not cover, ``max(0, wait / workers - rest of the step)``.
* :data:`BFLOAT16` (``float32_copies``): float32 copies sent as bfloat16: half the bytes
  (with a GPU model, the copy's time scaled by the model's ratio at that size, latency kept;
  else half its time). NB: the cast itself is not charged: under autocast the GPU casts anyway.

:func:`rank` tries every what-if a step allows and ranks them by saving; it also replays all of
them together: savings overlap (two syncs in a GPU-bound step each save little, but both the
same idle time), so the sum of the savings is not the saving of the sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from profilers.timing.gpu_model.rates import MIN_KERNEL_NS, copy_ns, fill_ns
from profilers.timing.gpu_model.specs import GpuSpec
from profilers.timing.replay import D2H, H2D, HOST, INPUT, KERNEL, SYNC, ReplayOp, replay

DEFER_SYNC = "defer_sync"
PINNED = "pinned_non_blocking"
ON_DEVICE = "create_on_device"
OVERLAP_INPUT = "overlap_input"
BFLOAT16 = "bfloat16_copies"
KINDS = (DEFER_SYNC, PINNED, ON_DEVICE, OVERLAP_INPUT, BFLOAT16)
DECIDES = re.compile(r"^\s*(if|elif|while|assert)\b")
"""A line whose source starts so reads a GPU value to decide what the script does."""

HINT_WHATIFS = {
    "item_in_loop": DEFER_SYNC,
    "log_every_step": DEFER_SYNC,
    "d2h_in_loop": DEFER_SYNC,
    "data_dependent": DEFER_SYNC,
    "blocking_h2d": PINNED,
    "non_blocking_pageable": PINNED,
    "loader_pin": PINNED,
    "loader_non_blocking": PINNED,
    "pinned_non_blocking": PINNED,
    "created_on_cpu": ON_DEVICE,
    "float32_copies": BFLOAT16,
}
"""A hint's kind -> the what-if that states its saving: the one map (gpuwatch's hint registry,
``gpuwatch.analysis.hints.KINDS``, reads it). NB: not the loader's ``input_bound``: the what-if
overlaps loading with one worker, while the hint recommends several; it is ranked by the input
wait it costs, the most those can save."""

_COPY_FIXES = (ON_DEVICE, PINNED, BFLOAT16)
"""Fixes of one copy that exclude each other (the best of them counts when all are applied)."""


class WhatIf:
    """One fix: its ``kind`` (:data:`KINDS`), the ``line`` it applies to (None: every line),
    ``every`` (a deferred sync: read once per that many steps, 0: removed) and ``workers``
    (loader processes, for :data:`OVERLAP_INPUT`)."""

    __slots__ = ("every", "kind", "line", "workers")

    def __init__(
        self, kind: str, line: str | None = None, *, every: int = 0, workers: int = 1
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown what-if {kind!r} (one of {', '.join(KINDS)})")
        if every < 0 or workers < 1:
            raise ValueError("every must be >= 0 and workers >= 1")
        self.kind = kind
        self.line = line
        self.every = every
        self.workers = workers

    @property
    def steps(self) -> int:
        """Chained steps it is replayed over."""
        return self.every if self.kind == DEFER_SYNC and self.every > 1 else 1

    def describe(self) -> str:
        """What the fix is, in words (``read the value once per 10 steps``)."""
        if self.kind == DEFER_SYNC:
            return (
                f"read the value once per {self.every} steps"
                if self.every > 1
                else "remove the sync (keep the value on the device)"
            )
        if self.kind == OVERLAP_INPUT:
            return f"load the next batch while the step runs ({self.workers} worker(s), prefetch)"
        return {
            PINNED: "copy from pinned memory with non_blocking=True",
            ON_DEVICE: "create the tensor on the device",
            BFLOAT16: "send float32 copies as bfloat16",
        }[self.kind]

    def __repr__(self) -> str:
        return f"WhatIf({self.kind!r}, {self.line!r}, every={self.every}, workers={self.workers})"


class Saving:
    """A fix's saving per step: ``base_ns`` (the step as it ran), ``new_ns`` (with the fix),
    ``saving_ns`` and ``share`` (of the step), and how many ``ops`` it changed."""

    __slots__ = ("base_ns", "new_ns", "ops", "saving_ns", "share", "whatif")

    def __init__(self, whatif: WhatIf, base_ns: float, new_ns: float, ops: int) -> None:
        self.whatif = whatif
        self.base_ns = base_ns
        self.new_ns = new_ns
        self.saving_ns = base_ns - new_ns
        self.share = self.saving_ns / base_ns if base_ns > 0 else 0.0
        self.ops = ops


class Ranking:
    """Every applicable fix ranked by saving (``savings``), the step as it ran (``base_ns``),
    the sum of the savings (``sum_ns``), the saving of all the fixes applied together
    (``combined_ns``; copy fixes of one line that exclude each other: the best one) and
    ``interaction_ns = sum_ns - combined_ns`` (positive: the fixes save the same time)."""

    __slots__ = ("base_ns", "combined", "combined_ns", "interaction_ns", "savings", "sum_ns")

    def __init__(
        self, base_ns: float, savings: list[Saving], combined: list[WhatIf], combined_ns: float
    ) -> None:
        self.base_ns = base_ns
        self.savings = savings
        self.combined = combined
        self.sum_ns = sum(s.saving_ns for s in savings)
        self.combined_ns = combined_ns
        self.interaction_ns = self.sum_ns - combined_ns


def _hits(op: ReplayOp, w: WhatIf) -> bool:
    if w.line is not None and op.line != w.line:
        return False
    kind = w.kind
    if kind == DEFER_SYNC:
        # NB: a blocking host-to-device copy counts as a sync (cause copy_to_device), but there
        # is no value to read later: its fixes are PINNED and ON_DEVICE.
        return op.kind == SYNC or (op.sync is not None and op.kind != H2D)
    if kind == PINNED:
        return (op.kind == H2D or (op.kind == D2H and op.sync is None)) and op.blocks_host
    if kind == ON_DEVICE:
        return op.kind == H2D
    if kind == BFLOAT16:
        return op.kind in (H2D, D2H) and op.dtype == "float32"
    return op.kind == INPUT and op.wait_ns > 0


def _defer(op: ReplayOp, every: int) -> list[ReplayOp]:
    """The op with its sync read once per ``every`` steps (0: never)."""
    read_back = op.kind in (SYNC, D2H)
    kept = (
        op.changed(kind=HOST, sync=None, gpu_ns=0, nbytes=0) if read_back else op.changed(sync=None)
    )
    if every <= 1:
        return [kept]
    if read_back:
        return [kept, op.changed(host_ns=0, overhead_ns=0, every=every)]
    sync = ReplayOp(SYNC, op.line, stream=op.stream, sync=op.sync, every=every)
    return [kept, sync]


def _fixed(op: ReplayOp, w: WhatIf, gpu: GpuSpec | None) -> list[ReplayOp]:
    """The op with ``w`` applied (``w`` hits it)."""
    if w.kind == DEFER_SYNC:
        return _defer(op, w.every)
    if w.kind == PINNED:
        ns = op.gpu_ns
        if gpu is not None and not op.pinned:
            ns = _scaled(op, gpu, op.nbytes, True)
        return [op.changed(pinned=True, non_blocking=True, sync=None, gpu_ns=ns)]
    if w.kind == ON_DEVICE:
        ns = MIN_KERNEL_NS if gpu is None else fill_ns(gpu, op.nbytes)
        return [op.changed(kind=KERNEL, sync=None, gpu_ns=ns, pinned=False, non_blocking=False)]
    half = op.nbytes // 2
    ns = op.gpu_ns // 2 if gpu is None else _scaled(op, gpu, half, op.pinned)
    return [op.changed(nbytes=half, dtype="bfloat16", gpu_ns=ns)]


def _scaled(op: ReplayOp, gpu: GpuSpec, nbytes: int, pinned: bool) -> int:
    """The copy's recorded time scaled by the model's ratio for the changed copy: the
    measurement keeps what the model does not know (this machine's bus), the model says how
    much the change is worth. NB: under ``--fake-cuda --gpu`` the recorded time is the
    model's, so this is the model's time for the new copy exactly."""
    before = copy_ns(gpu, op.kind, op.nbytes, op.pinned)
    return round(op.gpu_ns * copy_ns(gpu, op.kind, nbytes, pinned) / before)


def apply(
    ops: list[ReplayOp], whatif: WhatIf, gpu: GpuSpec | None = None, drop_overhead: bool = True
) -> tuple[list[ReplayOp], int]:
    """The step's ops with ``whatif`` applied, and how many ops it changed. ``gpu``: the model
    that times the new copies and kernels (None: recorded times, conservatively)."""
    if whatif.kind == OVERLAP_INPUT:
        return _overlap_input(ops, whatif, drop_overhead)
    out: list[ReplayOp] = []
    changed = 0
    for op in ops:
        if _hits(op, whatif):
            out.extend(_fixed(op, whatif, gpu))
            changed += 1
        else:
            out.append(op)
    return out, changed


def _overlap_input(
    ops: list[ReplayOp], w: WhatIf, drop_overhead: bool
) -> tuple[list[ReplayOp], int]:
    hit = [i for i, op in enumerate(ops) if _hits(op, w)]
    waited = sum(ops[i].wait_ns for i in hit)
    if not hit:
        return list(ops), 0
    out = list(ops)
    for i in hit:
        out[i] = ops[i].changed(wait_ns=0)
    rest = replay(out, drop_overhead=drop_overhead).wall_ns
    left = max(0.0, waited / w.workers - rest)
    for i in hit:
        out[i] = ops[i].changed(wait_ns=round(left * ops[i].wait_ns / waited))
    return out, len(hit)


def saving(
    ops: list[ReplayOp],
    whatif: WhatIf,
    *,
    gpu: GpuSpec | None = None,
    drop_overhead: bool = True,
    base_ns: float | None = None,
) -> Saving:
    """What ``whatif`` saves per step (``drop_overhead``: both replays without the profiler's
    own time, as the user's run would go). ``base_ns``: the step's replayed time over
    ``whatif.steps`` chained steps, if already known."""
    steps = whatif.steps
    if base_ns is None:
        base_ns = replay(ops, steps=steps, drop_overhead=drop_overhead).step_ns
    fixed, changed = apply(ops, whatif, gpu, drop_overhead)
    new = replay(fixed, steps=steps, drop_overhead=drop_overhead).step_ns
    return Saving(whatif, base_ns, new, changed)


def candidates(
    ops: list[ReplayOp],
    *,
    every: int = 10,
    workers: int = 1,
    on_device: Iterable[str] = (),
    decides: Iterable[str] = (),
) -> list[WhatIf]:
    """Every what-if the step allows, per line in the order the lines first ran. ``on_device``:
    the lines whose copied tensors were made by a factory on the host (the ``created_on_cpu``
    hint; only there can the tensor be made on the device instead). ``decides``: the lines whose
    read decides what the script does (:data:`DECIDES`): reading them less often would change
    the script, so they get no deferred sync."""
    made_here, deciding = set(on_device), set(decides)
    by_line: dict[str, list[ReplayOp]] = {}
    for op in ops:
        by_line.setdefault(op.line, []).append(op)
    probes = [WhatIf(k, every=every, workers=workers) for k in KINDS]
    out: list[WhatIf] = []
    for line, mine in by_line.items():
        for probe in probes:
            if (probe.kind == ON_DEVICE and line not in made_here) or (
                probe.kind == DEFER_SYNC and line in deciding
            ):
                continue
            if any(_hits(op, probe) for op in mine):
                out.append(WhatIf(probe.kind, line, every=every, workers=workers))
    return out


def rank(
    ops: list[ReplayOp],
    *,
    gpu: GpuSpec | None = None,
    every: int = 10,
    workers: int = 1,
    on_device: Iterable[str] = (),
    decides: Iterable[str] = (),
    drop_overhead: bool = True,
) -> Ranking:
    """Every applicable what-if (:func:`candidates`) ranked by its saving per step, and all of
    them applied together (replayed over ``every`` chained steps when a sync is deferred)."""
    found = candidates(ops, every=every, workers=workers, on_device=on_device, decides=decides)
    bases: dict[int, float] = {}

    def base(steps: int) -> float:
        if steps not in bases:
            bases[steps] = replay(ops, steps=steps, drop_overhead=drop_overhead).step_ns
        return bases[steps]

    savings = [
        saving(ops, w, gpu=gpu, drop_overhead=drop_overhead, base_ns=base(w.steps)) for w in found
    ]
    savings.sort(key=lambda s: (-s.saving_ns, s.whatif.line or "", s.whatif.kind))
    best_copy: dict[str, Saving] = {}
    for s in savings:
        if s.whatif.kind in _COPY_FIXES and s.whatif.line is not None:
            best_copy.setdefault(s.whatif.line, s)  # savings are sorted: the first is the best
    together = [
        s.whatif
        for s in savings
        if s.whatif.kind not in _COPY_FIXES or best_copy.get(s.whatif.line or "") is s
    ]
    # NB: input overlap last: the wait it leaves depends on the rest of the (fixed) step.
    together.sort(key=lambda w: w.kind == OVERLAP_INPUT)
    fixed = ops
    for w in together:
        fixed, _ = apply(fixed, w, gpu, drop_overhead)
    steps = max((w.steps for w in together), default=1)
    new = replay(fixed, steps=steps, drop_overhead=drop_overhead).step_ns if together else base(1)
    return Ranking(base(1), savings, together, base(steps) - new)
