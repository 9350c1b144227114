"""The time view never charges gpuwatch's own work to the user's lines: on a fake GPU each op's
host time is mostly the simulation's, so the view is off there and the summary says why; and a run
with no step speaks of the run, not of "per step"."""

from __future__ import annotations

import time

import pytest
import torch

import profilers
from gpuwatch.report.hints import hints
from gpuwatch.report.line_costs import cost_words
from gpuwatch.report.timeview import time_lines
from tests import conftest
from tests.profiler_helpers import line_of


@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
def test_on_a_fake_gpu_the_time_view_is_off_and_says_why():
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda() as harness, profilers.profile(kernel_timing=False) as prof:
        x = torch.ones(64, 64).to("cuda:0")
        for _ in range(5):
            (x @ x).sum().item()
    r = prof.report()
    harness.mark(r)
    assert r.time is None and "time" not in r.to_dict()
    assert time_lines(r) == [
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
    costliest = [line for line in time_lines(r) if line.startswith("costliest line:")]
    assert (
        costliest and "per step" not in costliest[0] and "% of the run, measured)" in costliest[0]
    )
    assert f":{line_of('busy')}," in costliest[0]


def test_a_first_step_that_holds_the_setup_is_said_to_weigh_on_the_per_step_figures():
    x = torch.ones(16, 16)
    with profilers.profile() as prof:
        time.sleep(0.3)  # the setup: imports, a model built, a dataset read
        for _ in range(4):
            x = x @ x / 16
            profilers.step()
    r = prof.report()
    lines = time_lines(r)
    first = [line for line in lines if line.startswith("step 0 took ")]
    assert len(first) == 1 and lines.index(first[0]) == 1  # right under the verdict
    assert " (measured), " in first[0] and "x the median of the other steps kept (" in first[0]
    assert "the per-step figures above include it" in first[0]
    # a loop whose steps are alike says nothing of it
    with profilers.profile() as prof:
        for _ in range(4):
            x = x @ x / 16
            profilers.step()
    assert not any(line.startswith("step 0 took ") for line in time_lines(prof.report()))
