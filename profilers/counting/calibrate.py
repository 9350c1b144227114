"""The profiler's own cost per op that its hot path cannot time itself, measured at the start.

The hot path (profilers/counting/dispatch.py) times its own work; what it cannot see is the work
around it (the dispatcher entering Python, the mode stack, the call and return). That is measured
here once per profile: cheap ops run bare and under a scratch mode, the difference per op less
what its clock saw as the hot path's own time (the least of a few rounds): the cost of an op
that is not probed (below).

NB: the cost outside the hot path is not one number: it depends on what the op's arguments are
(a Python scalar in a tensor's place, ``y * 1.0001``, costs about twice a tensor operand, as the
dispatcher makes a tensor of it again when the mode runs the op), and a launch-bound step is all
such ops. So each op is also probed where it is first seen at a line (:class:`Prober`): its own
arguments run bare and under a scratch mode, the difference less the scratch hot path's own time
is that op's cost outside the hot path, and the step clock charges it to the profiler's own time
for every run of that op at that line (:meth:`profilers.timing.timeline.StepClock.settle`).

The fast path (profilers/counting/kernels.py) times its kernels too, and has the same blind spot
around each call it takes: :func:`fast_path_outside_ns` measures it on a Python number's cast,
the call it takes most often without counting anything.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload

from profilers.counting.dispatch import op_facts
from profilers.counting.mode import ProfilerMode
from profilers.counting.ops import Args, Call, Kwargs, Scope
from profilers.counting.origins import called_from
from profilers.counting.recorder import Recorder
from profilers.counting.threads import ThreadState
from profilers.stats import LineStats, OpCount
from profilers.timing.timeline import StepClock

ROUNDS = 15
STEPS = 5
MIX_OPS = 5
"""Rounds of the mix, and repeats of it per round (MIX_OPS ops each): 25 ops each way per
round (most run unpreempted), 5-15 ms in all. NB: 10 repeats gave the same spread over 12
starts at twice the cost, which every profile pays (2-core box under load, 2026-12-07)."""


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


def _rounds(
    state: ThreadState,
    work: Callable[[], None],
    inside: Scope,
    rounds: int,
    ok: Callable[[StepClock], bool],
) -> tuple[int, int, StepClock] | None:
    """``work()`` bare, then inside ``inside()`` with a scratch step clock on ``state`` (the
    thread's), in ``rounds`` alternating rounds: the least bare time, the least profiled time
    less what that clock saw as the profiler's own, and the last round's clock; None where
    ``ok(clock)`` says a round's calls did not all reach the profiler (no estimate).

    NB: on the wall clock, as the hot path's own time is (a CPU clock beside it read the
    profiled loop's preemptions inside the hot path as its own time, and took them off the
    cost outside it: a load of 5 on 2 cores gave 0 one start in four). Short rounds,
    alternating bare and profiled, and the least of each kind: on a machine busy with other
    work most rounds of a millisecond run unpreempted, and the least is one of them."""
    now = time.perf_counter_ns
    best_bare: int | None = None
    best_profiled: int | None = None
    clock: StepClock | None = None
    for _ in range(rounds):
        t0 = now()
        work()
        bare = now() - t0
        clock = StepClock(now())
        state.clock = clock
        with inside():
            t0 = now()
            work()
            profiled = now() - t0 - clock.own_ns
        state.clock = None
        if not ok(clock):
            return None
        best_bare = bare if best_bare is None else min(best_bare, bare)
        best_profiled = profiled if best_profiled is None else min(best_profiled, profiled)
    if best_bare is None or best_profiled is None or clock is None:
        return None
    return best_bare, best_profiled, clock


def outside_cost_ns(recorder: Recorder, rounds: int = ROUNDS, steps: int = STEPS) -> int:
    """Nanoseconds per op the mode costs outside its hot path (at least 0), over a mix of ops
    (:func:`_rounds`), on ``recorder``: a scratch one (its counts are thrown away)."""
    mode = ProfilerMode(recorder)
    a, b = torch.ones(8), torch.ones(8)
    with mode:
        _mix(a, b, 1)  # warms the scratch recorder's caches (its lines, the ops' facts)
    ops = steps * MIX_OPS
    # NB: the mode did not see every op where another mode sits above it: no estimate
    found = _rounds(
        recorder.state(), lambda: _mix(a, b, steps), lambda: mode, rounds, lambda c: c.ops >= ops
    )
    if found is None:
        return 0
    bare, profiled, clock = found
    return max(0, (profiled - bare) // clock.ops)  # NB: ops as the mode sees them (views too)


def backward_outside_ns(mode: ProfilerMode, recorder: Recorder, rounds: int = ROUNDS) -> int | None:
    """:func:`outside_cost_ns` for the ops of a backward (a small graph's, built bare, run bare
    and under ``mode``; the least of ``rounds`` each); None where the mode saw none of them.

    NB: not the forward's cost: autograd's engine hands the mode tensors that have no Python
    object yet and takes the GIL for each op; a training step's backward holds half its ops."""
    now = time.perf_counter_ns
    a, b = torch.ones(8, requires_grad=True), torch.ones(8)
    state = recorder.state()

    def graph() -> torch.Tensor:
        y = a
        for _ in range(STEPS):
            y = y * b + b
        return y.sum()

    bare: list[int] = []
    profiled: list[int] = []
    ops = 0
    for _ in range(rounds):
        y = graph()
        t0 = now()
        torch.autograd.grad(y, a)
        bare.append(now() - t0)
        y, clock = graph(), StepClock(now())
        state.clock = clock
        with mode:
            t0 = now()
            torch.autograd.grad(y, a)
            profiled.append(now() - t0 - clock.own_ns)
        state.clock = None
        ops = clock.ops
        if not ops:
            return None
    return max(0, (min(profiled) - min(bare)) // ops)


CASTS = 50
"""Python numbers added per round of the fast path's calibration (a millisecond or less)."""


def fast_path_outside_ns(
    recorder: Recorder, key_on: Scope, rounds: int = ROUNDS, casts: int = CASTS
) -> int:
    """Nanoseconds per call the fast path takes (profilers/counting/kernels.py) that its kernel
    cannot time itself: the dispatcher boxing the call into Python and back. Measured as the
    mode's is (:func:`_rounds`): a float32 tensor plus a Python int, whose cast of the number
    is a call the fast path takes and does not count, run bare and with the key on
    (``key_on()``), less what the kernel timed of itself. 0 where no call reached it."""
    a = torch.ones(4)

    def add_numbers() -> None:
        for _ in range(casts):
            a + 1

    with key_on():
        add_numbers()  # warms the kernel's first call
    # NB: own time 0: the calls never reached the kernel (a Python mode above the key)
    found = _rounds(recorder.state(), add_numbers, key_on, rounds, lambda c: c.own_ns > 0)
    if found is None:
        return 0
    bare, keyed, _ = found
    return max(0, (keyed - bare) // casts)


PROBE_ROUNDS = 5
PROBE_CALLS = 2
"""Rounds of a probe, and calls of the op each way per round (the least of each is kept)."""

BIG = 1 << 14
"""Tensors of more elements are not probed (the op runs 20 more times): a small op is what a
launch-bound step is made of, and on a large one the cost outside the hot path is a sliver."""


class Prober:
    """Measures an op's cost outside the hot path on its own arguments, under ``mode``, a
    scratch mode: ``recorder``'s (its counts are thrown away; its step clock on this thread
    measures its own time)."""

    def __init__(self, mode: ProfilerMode, recorder: Recorder) -> None:
        self.mode = mode
        self.recorder = recorder
        self.clock = StepClock(time.perf_counter_ns())
        self.probed = 0
        self.backward_of: Recorder | None = None
        """The profile's recorder (a backward under way: its ``backward_line``)."""
        self.scale = 1.0
        """What a probe reads is multiplied by (:meth:`scale_to`)."""

    def scale_to(self, mix_ns: int) -> float:
        """Sets :attr:`scale` so that the probes of the calibration mix's ops average
        ``mix_ns``, the mix's cost per op outside the hot path as a step runs it.

        NB: a probe runs one op over and over from one frame, through ``OpOverload`` (its
        caches warm, no user Python between); in a step the same ops cost more outside the hot
        path (alternating ops and lines, the user's own Python between them, torch's Python
        bindings), by about 1.3-1.6x on a loaded 2-core box. A probe says how ops differ
        from each other; the mix, run as a step, says what they cost: both measured here."""
        a, b = torch.ones(8), torch.ones(8)
        aten = torch.ops.aten
        mix = (
            (aten.mul.Tensor, (a, 1.0001)),
            (aten.add.Tensor, (a, b)),
            (aten.add.Tensor, (a, 0.5)),
            (aten.sum.default, (a,)),
            (aten.view.default, (a, [2, 4])),
        )
        probes = [self.probe(f, op_facts(f).call, args, {}) for f, args in mix]
        found = [p for p in probes if p]
        if mix_ns > 0 and len(found) == len(mix):
            self.scale = mix_ns / (sum(found) / len(found))
        return self.scale

    def probe(self, func: OpOverload, call: Call, args: Args, kwargs: Kwargs) -> int | None:
        """Nanoseconds per run of ``func`` on ``args`` outside the hot path (at least 0), or
        None where it cannot be probed safely (random ops, large or non-CPU tensors, tensor
        subclasses). Mutated arguments are cloned first: the user's tensors are never written."""
        ready = probe_args(func, args, kwargs)
        if ready is None:
            return None
        args, kwargs = ready
        clock = self.clock
        state = self.recorder.state()
        before, state.clock = state.clock, clock
        ns = time.perf_counter_ns
        best_bare = best_mode = None
        try:
            call(*args, **kwargs)
            with self.mode:
                call(*args, **kwargs)  # warms the scratch recorder (the op's facts, its line)
            for _ in range(PROBE_ROUNDS):
                t0 = ns()
                for _ in range(PROBE_CALLS):
                    call(*args, **kwargs)
                bare = ns() - t0
                own0 = clock.own_ns
                with self.mode:
                    t0 = ns()
                    for _ in range(PROBE_CALLS):
                        call(*args, **kwargs)
                    moded = ns() - t0 - (clock.own_ns - own0)
                best_bare = bare if best_bare is None else min(best_bare, bare)
                best_mode = moded if best_mode is None else min(best_mode, moded)
        finally:
            state.clock = before
        self.probed += 1
        assert best_bare is not None and best_mode is not None
        return max(0, int((best_mode - best_bare) * self.scale) // PROBE_CALLS)

    def note(
        self,
        clock: StepClock,
        entry: OpCount,
        line: LineStats,
        func: OpOverload,
        call: Call,
        args: Args,
        kw: Kwargs,
    ) -> None:
        """The op ``func`` was first seen at ``line`` (its count is ``entry``): its cost
        outside the hot path, probed, for :meth:`settle` (nothing raises). NB: not inside a
        backward (its ops keep the calibrated mean): with the probes, AccumulateGrad copied a
        grad it steals otherwise (two more ops at the ``.backward()`` line); nor in the
        backward's preparation, before the engine runs (its first grad, ``ones_like``)."""
        if self.backward_of is not None and (
            self.backward_of.backward_line is not None
            or called_from(sys._getframe(1), _AUTOGRAD_FILE, 8)  # autograd.backward/grad
        ):
            return
        try:
            ns = self.probe(func, call, args, kw)
        except Exception:  # NB: a probe that fails leaves the op at the calibrated mean
            ns = None
        if ns is not None:
            clock.probes.append([entry, line, ns, entry.count])

    def settle(self, clock: StepClock) -> int:
        """:func:`settle`, the step clock's call when it closes a step."""
        return settle(clock)


def settle(clock: StepClock) -> int:
    """On closing a step: the probed ops' cost outside the hot path, less the
    ``outside_ns`` the hot path took for each, moves from their lines' launch time to the
    profiler's own (the nanoseconds moved; negative: the calibrated mean was too much).

    NB: an op's count is that of every thread; one that the clock's thread did not run (an
    autograd device thread's) was not charged there either: at most the step's ``ops``
    are settled (the rest scaled down)."""
    runs: list[tuple[list[Any], int]] = []
    seen = 0
    for p in clock.probes:
        n = p[0].count - p[3]
        if n:
            p[3] = p[0].count
            runs.append((p, n))
            seen += n
    if not seen:
        return 0
    scale = min(1.0, clock.ops / seen)
    lines = clock.lines
    moved = 0
    for p, n in runs:
        ns = int(n * scale * (p[2] - clock.outside_ns))
        rec = lines.get(p[1])
        if rec is None or rec.launch_ns < ns:  # its line ran none of this step's ops
            rec = max(lines.values(), key=lambda r: r.launch_ns, default=None)
        if rec is None:
            continue
        ns = min(ns, rec.launch_ns)
        rec.launch_ns -= ns
        moved += ns
    clock.own_ns += moved
    clock.probed_ops += int(seen * scale)
    return moved


_AUTOGRAD_FILE = os.path.join("torch", "autograd", "__init__.py")


def probe_args(func: OpOverload, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs] | None:
    """``(args, kwargs)`` to probe ``func`` with (written tensors cloned), or None: not safe."""
    if func.namespace != "aten" or not any("Tensor" in str(r.type) for r in func._schema.returns):
        # NB: only ATen's own ops, and only those that make a tensor: a collective
        # (c10d, _c10d_functional) run again on one rank would hang or corrupt the others; a
        # user's custom op may write files; aten ops that return nothing (_print,
        # _assert_async, record_stream) are run for their effect
        return None
    if torch.Tag.nondeterministic_seeded in func.tags:
        return None  # NB: another draw would move the user's random stream
    tensors = 0
    for value in (*args, *kwargs.values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor):
                if type(t) is not torch.Tensor or t.device.type != "cpu" or t.numel() > BIG:
                    return None
                tensors += 1
    if not tensors:
        return None  # NB: a factory (no tensor in): run again, torch then detached its result
    schema = func._schema
    if not schema.is_mutable:
        return args, kwargs
    cloned, kw = list(args), dict(kwargs)
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        if i < len(cloned) and isinstance(t := cloned[i], torch.Tensor):
            cloned[i] = t.clone()
        elif isinstance(t := kw.get(arg.name), torch.Tensor):
            kw[arg.name] = t.clone()
        elif i < len(cloned) or arg.name in kw:
            return None  # a list of written tensors (foreach ops): not probed
    return tuple(cloned), kw


def start_clock(recorder: Recorder, keep: int, key_on: Scope | None = None) -> StepClock:
    """The step clock of a profile about to start on this thread: calibrated (the dispatch
    mode's cost outside its hot path, with each op probed on the CPU; the fast path's cost
    around each call it takes, ``key_on`` switching its key on), set on this thread's state.
    Call it before the profile's mode is entered (or the fast path's key switched on)."""
    every_op = recorder.counting == "every_op"
    outside = 0
    backward: int | None = None
    prober = None
    if every_op:
        scratch = Recorder(
            recorder.user,
            kernel_timing=recorder.kernel_timing,
            timeline_capacity=0,
            is_pinned=recorder.is_pinned,
        )
        outside = outside_cost_ns(scratch)
        active, recorder.active = recorder.active, False  # NB: its backward patch passes it by
        try:  # NB: a profile may start under no_grad or inference_mode: grad on for the graph
            with torch.inference_mode(False), torch.enable_grad():
                backward = backward_outside_ns(ProfilerMode(scratch), scratch)
        except Exception as exc:  # never into user code: the forward's figure stands in
            recorder.internal_error("backward calibration", exc)
        finally:
            recorder.active = active
        if recorder.host_timing:  # NB: on the CPU only: a GPU's ops are not run twice
            prober = Prober(ProfilerMode(scratch), scratch)
            prober.backward_of = recorder
            prober.scale_to(outside)
    elif key_on is not None:
        outside = fast_path_outside_ns(recorder, key_on)
    clock = StepClock(
        time.perf_counter_ns(), keep=keep, outside_ns=outside, lines_measured=every_op
    )
    clock.prober = prober
    if every_op and backward is not None:
        clock.outside_backward_ns = backward
    recorder.state().clock = clock
    return clock
