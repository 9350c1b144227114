"""The profiler's own cost per op that its hot path cannot time itself, measured at the start.

The hot path (profilers/_dispatch.py) times its own work from its first line to its last; what it
cannot see is the work around it: the dispatcher entering Python for the mode, the mode stack,
the call and return. That part is measured here, once per profile: the same cheap op run bare and
under the profiler's own mode (a scratch recorder with a clock of its own), the difference per op
less what that clock saw as the hot path's own time. The fastest of a few rounds of each is kept (the
least disturbed by other work on the machine).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

SAMPLES = 101
"""Timings of each op of the mix, bare and profiled (the median of each is kept)."""


def _mix(a: torch.Tensor, b: torch.Tensor) -> list[Callable[[], object]]:
    # NB: the cost outside the hot path differs by op: a Python scalar operand costs more
    # than a tensor (torch wraps it), a metadata op skips the hot path's work but not the
    # entry into Python. One of each of the common shapes of a training step's ops.
    return [
        lambda: torch.add(a, b),
        lambda: a.mul(1.0001),
        lambda: a.sum(),
        lambda: a.view(2, 4),
    ]


def outside_cost_ns(
    make_mode: Callable[[Any], Any],
    make_recorder: Callable[[], Any],
    samples: int = SAMPLES,
) -> int:
    """Nanoseconds per op the mode costs outside its hot path (at least 0), averaged over a
    mix of ops.

    NB: each op is timed on its own and the median kept: on a machine busy with other work a
    whole loop is often interrupted, a single op of a few µs almost never (a median of loops
    read 3x the true cost at a load of 9 on 2 cores; the median of single ops held).

    Args:
        make_mode: the profiler's mode class, given a recorder.
        make_recorder: a scratch recorder (its counts are thrown away), made as the profile's is.
    """
    from profilers.timing.timeline import StepClock

    ns = time.perf_counter_ns
    recorder = make_recorder()
    mode = make_mode(recorder)
    clock = StepClock(ns())
    recorder.state().clock = clock
    costs = []
    for op in _mix(torch.ones(8), torch.ones(8)):
        bare, profiled = [], []
        with mode:
            op()  # warms the scratch recorder's caches (its line, the op's facts)
        for _ in range(samples):
            t0 = ns()
            op()
            bare.append(ns() - t0)
            with mode:
                own0 = clock.own_ns
                t0 = ns()
                op()
                profiled.append(ns() - t0 - (clock.own_ns - own0))
        costs.append(statistics.median(profiled) - statistics.median(bare))
    recorder.state().clock = None
    if clock.ops < len(costs) * (samples + 1):
        return 0  # the mode did not see every op (another mode above it): no estimate
    return max(0, int(sum(costs) / len(costs)))


def start_clock(recorder: Any, keep: int) -> Any:
    """The step clock of a profile about to start on this thread: calibrated (the dispatch
    mode only: the fast path's own time is all measured where it runs), set on this thread's
    state. Call it before the profile's mode is entered."""
    from profilers._mode import ProfilerMode
    from profilers._recorder import Recorder
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
