"""The fake GPU's own time, kept out of the script's host time under ``--fake-cuda --gpu NAME``:
the fake GPU's mode reads :data:`sim_clock` as an op enters it and calls
:func:`note_harness` as it leaves (and :func:`note_fake_op` with the model's prediction for a GPU
op); the way into the mode and back, which no hook sees, is calibrated per kind of op
(:func:`calibrate_fake_entry`). The :class:`~profilers.timing.oplog.OpLog` that takes them is
:data:`ACTIVE` while a profile predicts.

Its time off the CPU inside the mode (waiting for torch's intra-op workers that compute real
values, or for the GIL) is the simulation's too: summed on the log for every thread
(``OpLog.sim_off_ns``), and taken out of the script's time off the CPU
(:mod:`profilers.timing.off_cpu`).
"""

from __future__ import annotations

from contextlib import suppress
from time import perf_counter_ns, thread_time_ns
from typing import Any

ACTIVE: Any = None
"""The log (an ``OpLog``: not imported, it imports this module) the fake GPU's mode hands its
predictions to (``--fake-cuda --gpu``), else None."""


HOST_OP, GPU_OP, SCALAR = 0, 1, 2
"""Kinds of op for the fake GPU's calibrated way in and out (:func:`note_harness`)."""

_TENSOR_SLOTS: dict[Any, tuple[int, ...]] = {}


def scalar_operand(func: Any, args: Any) -> bool:
    """Whether a Python number stands for a tensor among ``func``'s arguments."""
    slots = _TENSOR_SLOTS.get(func)
    if slots is None:
        schema = getattr(func, "_schema", None)  # NB: none on a higher-order operator
        arguments = schema.arguments if schema is not None else ()
        slots = tuple(i for i, a in enumerate(arguments) if str(a.type) == "Tensor")
        _TENSOR_SLOTS[func] = slots
    return any(i < len(args) and type(args[i]) in (float, int, bool) for i in slots)


def calibrate_fake_entry(log: Any, runs: int = 5, calls: int = 20) -> None:
    """The fake GPU's CPU time per op that its mode's hook cannot see (the dispatcher's way
    into its Python and back, the fake result wrapped): an op run bare, less what the hook
    measured, the least of ``runs`` (the harness must be on, the profile's mode not yet), by
    kind into ``log.entry_ns`` (NB: the kinds differ by 2-3x: about
    8, 20, 17 and 27 us for a host op, a GPU op, and each with a Python number, on a loaded
    2-core box)."""
    import torch

    aten = torch.ops.aten
    x = torch.zeros(8, device="cuda:0")  # 32 bytes of fake memory: no peak anyone would see
    h = torch.zeros(8)
    kinds = (
        (aten.relu.default, (h,)),
        (aten.relu.default, (x,)),
        (aten.mul.Tensor, (h, 1.5)),
        (aten.mul.Tensor, (x, 1.5)),
    )
    global ACTIVE
    before, ACTIVE = ACTIVE, log
    best: list[int | None] = [None] * len(kinds)
    log.entry_ns = [0] * len(kinds)
    try:
        for _ in range(runs):
            for i, (op, args) in enumerate(kinds):
                log._fake.sim = 0
                t0 = thread_time_ns()
                for _ in range(calls):
                    op(*args)
                spent = thread_time_ns() - t0 - log._fake.sim
                found = best[i]
                best[i] = spent if found is None else min(found, spent)
    finally:
        ACTIVE = before
        log._fake.sim = 0
        log._fake.last = None
        log._fake.gpu_op = HOST_OP
    log.entry_ns = [max(0, (b or 0) // calls) for b in best]


sim_clock = thread_time_ns
"""The clock the fake GPU's mode reads before an op (the CPU time of its thread)."""

wall_clock = perf_counter_ns
"""The wall clock it reads too (its time off the CPU in there is the simulation's)."""


def note_fake_op(func: Any, args: Any, kwargs: Any, out: Any, t0: int | None) -> None:
    """Called by the fake GPU's mode after it ran an op on fake tensors (from ``t0``, read
    with :data:`sim_clock`; None: not through the dispatcher, nothing to note)."""
    log = ACTIVE
    if log is not None and t0 is not None:
        with suppress(Exception):  # NB: a prediction never fails the user's op; it is 0 then
            log.fake_op(func, args, kwargs, out, t0)


def note_harness(t0: int, func: Any, args: Any, wall0: int | None = None) -> None:
    """Called by the fake GPU's mode as each op (``func`` on ``args``) leaves it (entered at
    ``t0`` on :data:`sim_clock`, ``wall0`` on :func:`wall_clock`): all of that time, and the
    calibrated way in and out of its kind, is the simulation's, not the script's host time
    (``--gpu``: taken out of the next record's); so is its time off the CPU in there."""
    log = ACTIVE
    if log is not None:
        tls = log._fake
        kind = getattr(tls, "gpu_op", HOST_OP)
        tls.gpu_op = HOST_OP
        if scalar_operand(func, args):
            kind |= SCALAR
        cpu = thread_time_ns() - t0
        tls.sim = getattr(tls, "sim", 0) + cpu + log.entry_ns[kind]
        if wall0 is not None:
            off = perf_counter_ns() - wall0 - cpu
            if off > 0:  # NB: any thread's (a backward's device threads'): one sum, GIL-safe
                log.sim_off_ns += off
