"""Hints read a line by the steps it ran in: a line that copied or synced in one step only (the
one-time ``model.to(device)``) is never "in a loop", and per-step figures count only the steps in
which the line ran."""

from __future__ import annotations

import pytest
import torch

import profilers
from gpuwatch.analysis.hints import hints
from gpuwatch.output.text import step_lines
from tests.profiler_helpers import fake_mode, line_at, line_of


def _train() -> profilers.Report:
    with fake_mode():
        with profilers.profile() as prof:
            params = [torch.randn(4, 4) for _ in range(15)]
            params = [p.to("cuda:0") for p in params]  # @once
            opt = torch.optim.SGD([torch.nn.Parameter(torch.randn(2))], lr=0.1)
            for step in range(10):
                loss = (params[0] * 2).sum()
                loss.item()  # @every
                if step >= 6:
                    torch.ones(3).to("cuda:0")  # @late
                opt.step()
    return prof.report()


@pytest.mark.slow
def test_a_one_time_move_is_not_a_loop_and_per_step_counts_only_its_steps():
    r = _train()
    assert r.steps == {"count": 10, "source": "optimizer"}
    once, every, late = (line_at(r, line_of(m)) for m in ("once", "every", "late"))
    # 15 copies, all before the first step ends: one step; the loop's lines: their steps
    assert (once.h2d.count, once.steps_active) == (15, 1)
    assert (every.syncs.count, every.steps_active) == (10, 10)
    assert (late.h2d.count, late.steps_active) == (4, 4)  # steps 6, 7, 8, 9
    back = profilers.Report.from_dict(r.to_dict())  # the JSON keeps the field
    assert [s.steps_active for s in back.lines] == [s.steps_active for s in r.lines]

    found = {h.line.line: h for h in hints(r)}
    assert line_of("once") not in found  # 15 blocking copies, but once: no "in a loop"
    assert found[line_of("every")].kind == "item_in_loop"
    # the line's measured time comes first, then the counts over its steps
    cost, counts = found[line_of("every")].evidence.split("; ", 1)
    assert cost.startswith("it costs ") and " of host time per step (" in cost
    assert cost.endswith("% of the step, measured)")
    assert counts == "10 syncs at this line; 1 sync and 1 copy per step"
    assert step_lines(r)[1] == f"lines that copy or sync every step: {every.file}:{every.line}"


def test_per_step_figures_are_over_the_steps_the_line_ran_in():
    from gpuwatch.analysis.hints import in_steps

    late = line_at(_train(), line_of("late"))
    # 4 copies and 4 syncs in 4 of the 10 steps: 1 each per step it ran, not 0.4
    assert in_steps(late, 10) == "1 sync and 1 copy per step, in 4 of 10 steps"
