"""``gpuwatch diff`` speaks of time where the runs measured it (each report's ``time``): each run's
verdict and step, and each line's time before and after, in the JSON (published schema) and the
text; "not measured" where a run did not measure it (--fake-cuda)."""

from __future__ import annotations

import io
import time
from typing import Any

import torch
from rich.console import Console
from torch.utils.data import DataLoader, Dataset

import profilers
from gpuwatch.analysis.diff import diff_reports
from gpuwatch.analysis.diff_findings import DiffDoc
from gpuwatch.output.diff_text import render
from gpuwatch.output.load import problem
from tests.profiler_helpers import line_of

SLEEP_S = 0.05


class _Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return torch.ones(4)


def _run(batches: Any) -> profilers.Report:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profilers.profile() as prof:
        for x in batches:  # @pull
            model(x).sum().backward()
            opt.step()
    return prof.report()


def test_a_diff_carries_each_runs_verdict_and_each_lines_time():
    slow = _run(DataLoader(_Slow(), batch_size=1))
    fast = _run([torch.ones(1, 4)] * 4)
    d = diff_reports(slow, fast).to_dict("slow.json", "fast.json")
    assert problem(d, "gpuwatch.diff/1") is None  # the published schema
    before, after = d["before"]["time"], d["after"]["time"]
    assert before["verdict"] == "input-bound" and before["per_step"] is True
    assert before["measured_on"] == "host" and after["verdict"] != "input-bound"
    # the slow loader's steps each waited at least the sleep (the first also holds the start)
    assert before["ms"] >= SLEEP_S * 1000 > after["ms"]
    # the for line: a line in the slow run (collate runs ops there), none when a list feeds it
    (pull,) = [x for x in d["lines"] if x["before_line"] == line_of("pull")]
    assert pull["time_ms"]["before"] >= SLEEP_S * 1000
    assert (pull["time_ms"]["after"] or 0.0) < SLEEP_S * 1000
    out = io.StringIO()
    Console(file=out, width=200).print(render(DiffDoc.written(diff_reports(slow, fast).to_dict())))
    said = " ".join(out.getvalue().split())
    assert (
        "where the time goes (measured on the host, over the steps after the first): "
        "input-bound, " in said
    )
    assert "per step → " in said
    assert before["over"] == after["over"] == "steps after the first"
    # a report from before after_first (over its whole run) is compared with the other's run
    older = profilers.Report.from_dict(slow.to_dict())
    assert older.time is not None
    older = older.replace(time=older.time.replace(after_first=None, first_step=None))
    d = diff_reports(older, fast).to_dict()
    assert d["before"]["time"]["over"] == d["after"]["time"]["over"] == "the run"
    assert d["after"]["time"]["ms"] == round(
        float(fast.time["run"]["wall_unprofiled_ms"]) / fast.time["steps_closed"], 6
    )
    out = io.StringIO()
    Console(file=out, width=200).print(render(DiffDoc.written(diff_reports(older, fast).to_dict())))
    said = " ".join(out.getvalue().split())
    assert "where the time goes (measured on the host): input-bound, " in said


def test_a_run_that_did_not_measure_time_says_so():
    measured = _run([torch.ones(1, 4)] * 2)
    with profilers.profile(time_steps=0) as prof:
        torch.ones(2).add(1)
    d = diff_reports(measured, prof.report()).to_dict()
    assert d["after"]["time"] is None and problem(d, "gpuwatch.diff/1") is None
    assert all(x["time_ms"]["after"] is None for x in d["lines"])
    out = io.StringIO()
    Console(file=out, width=200).print(
        render(DiffDoc.written(diff_reports(measured, prof.report()).to_dict()))
    )
    assert "→ not measured" in " ".join(out.getvalue().split())
