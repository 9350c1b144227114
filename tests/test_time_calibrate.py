"""The profiler's own time, taken out honestly: each op's cost outside the hot path,
probed on its own arguments where it is first seen, moves from the user's line to the profiler's
own time when the step closes (exact on an injected clock); a probe never writes the user's
tensors nor draws from their random stream; closing a step is the profiler's own time; and,
bounded, the step a launch-bound loop is stated to take unprofiled is near a plain run's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

import profilers
from profilers.counting.calibrate import BIG, Prober, probe_args, settle
from profilers.counting.mode import ProfilerMode
from profilers.counting.recorder import Recorder
from profilers.counting.user_code import UserCode
from profilers.stats import OpCount
from profilers.timing.timeline import StepClock

aten = torch.ops.aten


class _Line:
    def __init__(self, line: int) -> None:
        self.file, self.line = "train.py", line


def _op(clock: StepClock, line: Any, entry: OpCount, t_in: int, t_ret: int, t_out: int) -> None:
    """One op as profilers/counting/dispatch.py charges it (its call at ``t_in + 10``)."""
    entry.count += 1
    clock.line(line).launch_ns += t_in - clock.last_ns - clock.outside_ns + t_ret - (t_in + 10)
    clock.last_line = line
    clock.own_ns += 10 + t_out - t_ret + clock.outside_ns
    clock.ops += 1
    clock.last_ns = t_out


def test_a_probed_ops_cost_moves_from_its_line_to_the_profilers_own_time_at_step_close():
    mul, add = _Line(12), _Line(13)
    clock = StepClock(start_ns=0, outside_ns=100)
    clock.prober = SimpleNamespace(settle=settle)  # what the probes' Prober does on close
    mul_entry, add_entry = OpCount(), OpCount()
    # mul was probed at 300 ns outside the hot path, add at 40 (less than the mean of 100)
    clock.probes = [[mul_entry, mul, 300, 0], [add_entry, add, 40, 0]]
    t = 0
    for _ in range(3):  # 1000 ns of user Python before each op, the op runs 500 ns
        for line, entry in ((mul, mul_entry), (add, add_entry)):
            _op(clock, line, entry, t + 1000, t + 1510, t + 1530)
            t += 1530
    before = {k: clock.line(s).launch_ns for k, s in (("mul", mul), ("add", add))}
    step = clock.close(t)
    # mul: 3 runs x (300 - 100) more of the profiler's; add: 3 x (40 - 100) less
    assert step.lines["train.py:12"].launch_ns == before["mul"] - 600
    assert step.lines["train.py:13"].launch_ns == before["add"] + 180
    assert step.own_ns == 6 * (10 + 20 + 100) + 600 - 180
    assert sum(r.total_ns for r in step.lines.values()) + step.own_ns == step.wall_ns
    assert clock.probed_ops == 6
    # next step: only the runs since the last close are settled
    _op(clock, mul, mul_entry, t + 1000, t + 1510, t + 1530)
    assert settle(clock) == 200 and clock.probed_ops == 7
    assert settle(clock) == 0


def test_runs_of_an_op_on_threads_without_the_clock_are_not_settled_on_it():
    line = _Line(5)
    clock = StepClock(start_ns=0, outside_ns=100)
    entry = OpCount()
    clock.probes = [[entry, line, 600, 0]]
    _op(clock, line, entry, 10_000, 10_510, 10_530)
    _op(clock, line, entry, 20_000, 20_510, 20_530)
    entry.count += 3  # three runs on an autograd device thread: counted, not on this clock
    assert settle(clock) == 2 * 500  # the clock's two ops, not five
    assert clock.probed_ops == 2


def _prober() -> Prober:
    scratch = Recorder(UserCode(), kernel_timing=True, timeline_capacity=0)
    return Prober(ProfilerMode(scratch), scratch)


def test_a_probe_never_writes_the_users_tensors_nor_draws_their_random_numbers():
    prober = _prober()
    x = torch.arange(4.0)
    ns = prober.probe(aten.add_.Tensor, aten.add_.Tensor._op, (x, 1.0), {})
    assert ns is not None and ns >= 0
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]  # the probe wrote a clone, 22 times
    # random ops, written lists (foreach), big or subclassed tensors: not probed, not run
    state = torch.random.get_rng_state()
    assert probe_args(aten.bernoulli.default, (torch.full((4,), 0.5),), {}) is None
    assert torch.equal(torch.random.get_rng_state(), state)
    xs = [torch.ones(2), torch.ones(2)]
    assert probe_args(aten._foreach_add_.Scalar, (xs, 1.0), {}) is None
    assert probe_args(aten.relu.default, (torch.ones(BIG + 1),), {}) is None
    sub = torch.nn.Parameter(torch.ones(2))
    assert probe_args(aten.relu.default, (sub,), {}) is None
    assert probe_args(aten.relu.default, (torch.ones(2),), {}) is not None
    assert prober.probed == 1


def test_closing_a_step_is_the_profilers_own_time():
    with profilers.profile() as prof:
        torch.ones(4).add(1)
        profilers.step()
        clock = prof._recorder.step_clock  # type: ignore[union-attr]
        assert clock is not None
        # no op since the step closed: all of the new step's time so far is the closing
        own, since = clock.own_ns, clock.last_ns - clock.steps[-1].end_ns
    assert own == since > 0


CALLS = {"n": 0}


@torch.library.custom_op("gpuwatch_test::counted", mutates_args=())
def _counted(x: torch.Tensor) -> torch.Tensor:
    CALLS["n"] += 1  # a side effect a second run would repeat (a file written, a collective)
    return x + 1


def test_only_atens_own_ops_that_make_a_tensor_are_probed_the_users_run_once():
    CALLS["n"] = 0
    with profilers.profile() as prof:
        x = torch.ones(4)
        y = _counted(x)  # the user's own op, first seen at this line
        z = x.mul(2.0)  # an ATen op first seen here: probed
        profilers.step()
    assert CALLS["n"] == 1 and y.tolist() == [2.0] * 4 and z.tolist() == [2.0] * 4
    clock = prof._recorder.step_clock  # type: ignore[union-attr]
    assert clock is not None and clock.prober is not None and clock.prober.probed >= 1
    # run for their effect, or run on every rank at once: never again
    assert probe_args(aten._print.default, ("hello",), {}) is None
    assert probe_args(torch.ops.gpuwatch_test.counted.default, (torch.ones(2),), {}) is None


def test_an_op_of_a_backward_is_charged_the_backwards_own_cost_outside_the_hot_path():
    # NB: autograd hands the mode tensors with no Python object yet and takes the GIL for each
    # op: measured apart at the start (1.5-2 us an op more than a forward op's on the 2-core
    # box), and charged to each op of a backward, not the forward's figure
    with profilers.profile() as prof:
        clock = prof._recorder.step_clock  # type: ignore[union-attr]
        assert clock is not None and clock.outside_backward_ns > 0
        x = torch.ones(8, requires_grad=True)
        y, grad = (x * 2 + 1).sum(), torch.ones(())  # NB: no ones_like in .backward()
        profilers.step()
        clock.outside_ns, clock.outside_backward_ns = 0, 10**9  # a second per backward op
        ops = clock.ops
        y.backward(grad)
        in_backward = clock.ops - ops
        own_ns = clock.own_ns
    assert in_backward >= 2 and own_ns >= in_backward * 10**9
    assert x.grad is not None and x.grad.tolist() == [2.0] * 8


def test_a_profile_started_under_no_grad_or_inference_mode_calibrates_its_backward_all_the_same():
    # NB: the backward's calibration builds a small graph: with grad off it could not, and it
    # raised into the script at the profile's start
    for context in (torch.no_grad, torch.inference_mode):
        with context(), profilers.profile() as prof:
            clock = prof._recorder.step_clock  # type: ignore[union-attr]
            assert clock is not None and clock.outside_backward_ns > 0
            assert not torch.is_grad_enabled()
            y = torch.ones(4).add(1)
        assert y.tolist() == [2.0] * 4 and not prof.report().internal_errors
