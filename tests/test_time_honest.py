"""The time view never charges gpuwatch's own work to the user's lines: on a fake GPU each op's
host time is mostly the simulation's, so the view is off there and the summary says why; a run
with no step speaks of the run, not of "per step"; and the per-step figures leave out step 0,
which holds the setup before the first step, and say so."""

from __future__ import annotations

import json
import time

import pytest
import torch

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.analysis.diff_time import run_time
from gpuwatch.analysis.hints import hints
from gpuwatch.analysis.line_costs import cost_words
from gpuwatch.output.load import problem
from gpuwatch.output.timeview import time_charts, time_lines
from profilers import Report
from profilers.timing.timeline import StepClock
from profilers.timing.verdict import time_section
from tests import conftest
from tests.profiler_helpers import line_of


@pytest.mark.fake_cuda
@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
def test_on_a_fake_gpu_the_time_view_is_off_and_says_why():
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda() as harness, profilers.profile(kernel_timing=False) as prof:
        x = torch.ones(64, 64).to("cuda:0")
        for _ in range(5):
            (x @ x).sum().item()
    r = prof.report()
    r = harness.mark(r)
    assert r.time is None and "time" not in r.to_dict()
    assert time_lines(r, analyze(r)) == [
        "where the time goes: not measured under --fake-cuda (the host's time there is mostly "
        "the simulated GPU's own work, which is not your script's); --gpu NAME predicts it "
        "for a named GPU"
    ]
    assert all("the line costs " not in h.evidence for h in hints(r))  # no made-up cost on a hint


def test_a_run_with_no_step_speaks_of_the_run_not_per_step():
    with profilers.profile() as prof:  # the dispatch mode: host time per line
        x = torch.ones(256, 256)
        for _ in range(30):
            y = x @ x  # @busy
            float(y[0, 0])
    r = prof.report()
    assert r.time is not None and r.time["steps_closed"] == 0
    assert cost_words(r) == ("in all", "of the run")
    costliest = [line for line in time_lines(r, analyze(r)) if line.startswith("costliest line:")]
    assert (
        costliest and "per step" not in costliest[0] and "% of the run, measured)" in costliest[0]
    )
    assert f":{line_of('busy')}," in costliest[0]


class _Line:
    def __init__(self, line: int) -> None:
        self.file, self.line = "train.py", line


def _steps(clock: StepClock, line: _Line, ms: int, count: int) -> None:
    for _ in range(count):
        clock.line(line).launch_ns += ms * 1_000_000
        clock.last_ns += ms * 1_000_000
        clock.close(clock.last_ns)


def test_the_per_step_figures_leave_out_step_0_and_the_tail_after_the_last_step():
    setup, loop = _Line(3), _Line(7)
    clock = StepClock(start_ns=0)
    clock.line(setup).launch_ns += 300_000_000  # step 0: building the model before the loop
    clock.last_line = setup
    clock.last_ns = 300_000_000
    _steps(clock, loop, 10, 4)  # step 0 ends 10 ms into the loop; then three steps of 10 ms
    t = time_section(clock, 390_000_000)  # and a 50 ms tail after the last (a checkpoint)
    assert t["run"]["wall_unprofiled_ms"] == 390.0
    assert t["after_first"]["steps"] == 3 and t["after_first"]["wall_unprofiled_ms"] == 30.0
    assert t["first_step"]["wall_unprofiled_ms"] == 310.0
    r = Report(command=["train.py"], duration_s=0.39, steps={"count": 4, "source": "manual"})
    r = r.replace(time=t)
    assert problem(json.loads(r.to_json())) is None
    lines = time_lines(r, analyze(r))
    assert lines[0] == (
        "launch-bound: 10.0 ms per step over the 3 steps after the first, host work (Python + "
        "launch) 100% of the host's time (GPU not measured)"
    )
    assert lines[1] == (
        "step 0 took 310.0 ms (measured), 31x a step after it: it holds what ran before the "
        "first step (imports, building the model and the optimizer), left out of the per-step "
        "figures; its costliest line: train.py:3 (300.0 ms, 97%)"
    )
    assert lines[-1] == (
        "costliest line: train.py:7, 10.0 ms of host time per step (100% of the step, measured)"
    )
    assert run_time(r) == {"verdict": "launch-bound", "per_step": True, "ms": 10.0,
                           "over": "steps after the first", "measured_on": "host"}  # fmt: skip
    assert run_time(r, after_first=False)["ms"] == 97.5  # the run: 390 ms over 4 steps
    # a first step like the others: nothing said of it; one step: the run is the only figure
    clock = StepClock(start_ns=0)
    _steps(clock, loop, 10, 3)
    r = r.replace(time=time_section(clock, 30_000_000))
    assert not any(line.startswith("step 0 took ") for line in time_lines(r, analyze(r)))
    clock = StepClock(start_ns=0)
    _steps(clock, loop, 10, 1)
    r = r.replace(time=time_section(clock, 40_000_000))
    assert "after_first" not in r.time and "first_step" not in r.time
    assert time_lines(r, analyze(r))[0].startswith("launch-bound: 40.0 ms per step, ")


def test_a_real_setup_before_the_first_step_is_named_and_left_out():
    x = torch.ones(16, 16)
    with profilers.profile() as prof:
        time.sleep(0.3)  # @setup
        for _ in range(4):
            time.sleep(0.02)
            x = x @ x / 16
            profilers.step()
    r = prof.report()
    assert r.time is not None and r.time["after_first"]["steps"] == 3
    lines = time_lines(r, analyze(r))
    first = [line for line in lines if line.startswith("step 0 took ")]
    assert len(first) == 1 and lines.index(first[0]) == 1  # right under the verdict
    assert f"; its costliest line: tests/test_time_honest.py:{line_of('setup')} (" in first[0]
    # the HTML's bars leave it out too: drawn, it would flatten the later steps' bars
    fig = time_charts(r)["time"][0]
    assert list(fig.data[0].x) == ["step 1", "step 2", "step 3"]
    assert "; step 0 (" in fig.layout.title.text and "with the setup before it) left out" in (
        fig.layout.title.text
    )
    # each later step sleeps 20 ms; the per-step figure is one of them, not the setup's share
    # (tolerance: 20 ms of Python and scheduling on a loaded box)
    per = float(r.time["after_first"]["wall_unprofiled_ms"]) / 3
    assert 20.0 <= per < 40.0, per


def _setup_then_steps(slow_ms: int) -> list[str]:
    """The summary's lines for a 300 ms setup, a step 0 ending 10 ms into the loop, two steps
    of 10 ms and one of ``slow_ms``."""
    setup, loop = _Line(3), _Line(7)
    clock = StepClock(start_ns=0)
    clock.line(setup).launch_ns += 300_000_000
    clock.last_line = setup
    clock.last_ns = 300_000_000
    _steps(clock, loop, 10, 3)
    _steps(clock, loop, slow_ms, 1)
    wall_ms = 330 + slow_ms
    r = Report(
        command=["train.py"], duration_s=wall_ms / 1000, steps={"count": 4, "source": "manual"}
    )
    r = r.replace(time=time_section(clock, wall_ms * 1_000_000))
    return time_lines(r, analyze(r))


def test_step_0s_ratio_is_to_the_per_step_figure_the_verdict_states():
    lines = _setup_then_steps(40)  # the mean of the three later steps is 20 ms, the median 10
    assert lines[0].startswith("launch-bound: 20.0 ms per step over the 3 steps after the first")
    assert lines[1].startswith("step 0 took 310.0 ms (measured), 16x a step after it")


def test_step_0s_ratio_to_a_mean_a_slow_later_step_swelled_is_the_medians():
    lines = _setup_then_steps(2000)  # a 2 s step (a checkpoint): the mean of three is 673 ms
    assert lines[0].startswith("launch-bound: 673.3 ms per step over the 3 steps after the first")
    # step 0 is long beside most steps (31x their median), not "0x a step after it"
    assert lines[1].startswith("step 0 took 310.0 ms (measured), 31x the median step after it")
