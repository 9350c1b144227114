"""The profiler's own cost per op that its hot path cannot time itself, measured at the start.

The hot path (profilers/counting/dispatch.py) times its own work from its first line to its last; what it
cannot see is the work around it: the dispatcher entering Python for the mode, the mode stack,
the call and return. That part is measured here, once per profile: the same cheap op run bare and
under the profiler's own mode (a scratch recorder with a clock of its own), the difference per op
less what that clock saw as the hot path's own time. The least CPU time of a few rounds of each is
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

ROUNDS = 5
STEPS = 20
MIX_OPS = 5
"""Rounds of the mix, and repeats of it per round (MIX_OPS ops each): 500 ops bare and as
many profiled per round, 10-40 ms in all."""


def _mix(a: torch.Tensor, b: torch.Tensor, steps: int) -> None:
    # NB: the cost outside the hot path differs by op: a Python scalar operand costs more
    # than a tensor (torch wraps it), a metadata op skips the hot path's work but not the
    # entry into Python, an op on a tensor another op just made is the common case. One of
    # each of the common shapes of a training step's ops, chained as a step chains them.
    y = a
    for _ in range(steps):
        y = y * 1.0001 + b
        y = y + 0.5
        y.sum()
        y.view(2, 4)


def outside_cost_ns(
    make_mode: Callable[[Any], Any],
    make_recorder: Callable[[], Any],
    rounds: int = ROUNDS,
    steps: int = STEPS,
) -> int:
    """Nanoseconds per op the mode costs outside its hot path (at least 0), over a mix of ops.

    NB: timed in this thread's CPU time, not on the wall clock: on a machine busy with other
    work a longer loop is preempted more often, and the profiled loop, several times longer
    than the bare one, read up to 3x its true cost on the wall clock at a load of 8 on 2
    cores. The least of the rounds of each kind is kept.

    Args:
        make_mode: the profiler's mode class, given a recorder.
        make_recorder: a scratch recorder (its counts are thrown away), made as the profile's is.
    """
    from profilers.timing.timeline import StepClock

    cpu = time.thread_time_ns
    recorder = make_recorder()
    mode = make_mode(recorder)
    a, b = torch.ones(8), torch.ones(8)
    with mode:
        _mix(a, b, 1)  # warms the scratch recorder's caches (its lines, the ops' facts)
    ops = steps * MIX_OPS
    best_bare: int | None = None
    best_profiled: int | None = None
    seen = ops
    for _ in range(rounds):
        t0 = cpu()
        _mix(a, b, steps)
        bare = cpu() - t0
        clock = StepClock(time.perf_counter_ns())
        recorder.state().clock = clock
        with mode:
            t0 = cpu()
            _mix(a, b, steps)
            profiled = cpu() - t0 - clock.own_ns
        recorder.state().clock = None
        if clock.ops < ops:
            return 0  # the mode did not see every op (another mode above it): no estimate
        seen = clock.ops  # NB: ops as the mode sees them (metadata ops included)
        best_bare = bare if best_bare is None else min(best_bare, bare)
        best_profiled = profiled if best_profiled is None else min(best_profiled, profiled)
    if best_bare is None or best_profiled is None:
        return 0
    return max(0, (best_profiled - best_bare) // seen)


def start_clock(recorder: Any, keep: int) -> Any:
    """The step clock of a profile about to start on this thread: calibrated (the dispatch
    mode only: the fast path's own time is all measured where it runs), set on this thread's
    state. Call it before the profile's mode is entered."""
    from profilers.counting.mode import ProfilerMode
    from profilers.counting.recorder import Recorder
    from profilers.timing.timeline import StepClock

    every_op = recorder.counting == "every_op"
    outside = 0
    if every_op:
        outside = outside_cost_ns(
            ProfilerMode,
            lambda: Recorder(
                recorder.user,
                kernel_timing=recorder.kernel_timing,
                timeline_capacity=0,
                is_pinned=recorder.is_pinned,
            ),
        )
    clock = StepClock(
        time.perf_counter_ns(), keep=keep, outside_ns=outside, lines_measured=every_op
    )
    recorder.state().clock = clock
    return clock
