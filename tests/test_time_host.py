"""Where each step's time goes, on the host: the step clock's arithmetic exact on an
injected timeline, and real runs on the CPU: a loader that sleeps a known time is input-bound with
that time at the ``for`` line; a host loop of known cost is host-bound at its line (no GPU work: nothing launched); the step
time stated for an unprofiled run agrees with a plain run."""

from __future__ import annotations

import json
import statistics
import time
from contextlib import ExitStack
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.output.load import problem
from profilers import Report
from profilers.counting.calibrate import fast_path_outside_ns, start_clock
from profilers.counting.kernels import CountingKernels
from profilers.counting.recorder import Recorder
from profilers.counting.user_code import UserCode
from profilers.timing.charge import charge_transfer, timed_on_fast_path, untimed
from profilers.timing.timeline import COPY, INPUT, SYNC, UNATTRIBUTED, StepClock
from profilers.timing.verdict import breakdown, step_dict


class _Line:
    def __init__(self, line: int) -> None:
        self.file, self.line = "train.py", line


def _op(clock: StepClock, line: Any, t_in: int, t_call: int, t_ret: int, t_out: int) -> None:
    """What profilers/counting/dispatch.py does per op on the step clock (inlined there)."""
    clock.line(line).launch_ns += t_in - clock.last_ns - clock.outside_ns + t_ret - t_call
    clock.last_line = line
    clock.own_ns += t_call - t_in + t_out - t_ret + clock.outside_ns
    clock.ops += 1
    clock.last_ns = t_out


def test_the_clock_charges_every_nanosecond_once_on_an_injected_timeline():
    loop, body, item = _Line(10), _Line(12), _Line(14)
    clock = StepClock(start_ns=0, outside_ns=5)
    # The loader: Python from 0 to 100 (launch, at the for line), 110..1110 in __next__, the
    # wrapper's own 10 + 10.
    clock.wait(loop, INPUT, None, 100, 110, 1110, 1120)
    # An op at line 12: in at 1200 (80 since the wait, less 5 outside the hot path), ran
    # 1300..1500, out at 1520: launch 75 + 200; own 100 + 20 + 5.
    _op(clock, body, 1200, 1300, 1500, 1520)
    # An .item() at line 14: in at 1550 (launch 25), ran 1600..2000, out at 2010; its 400 ns
    # move to sync (cause item).
    _op(clock, item, 1550, 1600, 2000, 2010)
    charge_transfer(clock, item, profilers.Transfer(None, sync="item"), 400, 1600)
    step = clock.close(2500)  # 490 ns of Python after the last op go to its line
    lines = step.lines
    assert (lines["train.py:10"].launch_ns, lines["train.py:10"].input_ns) == (100, 1000)
    assert lines["train.py:12"].launch_ns == 75 + 200
    assert (lines["train.py:14"].launch_ns, lines["train.py:14"].sync_ns) == (25 + 490, 400)
    assert lines["train.py:14"].sync_causes == {"item": 400}
    assert lines["train.py:14"].host_reads == lines["train.py:14"].syncs == 1
    assert step.own_ns == 20 + 125 + 65 and step.ops == 2
    # Every nanosecond once: 1100 + 275 + 915 + own 210 = 2500.
    assert sum(r.total_ns for r in lines.values()) + step.own_ns == step.wall_ns == 2500
    d = step_dict(step, origin_ns=0)
    assert d["verdict"] == "input-bound" and d["wall_unprofiled_ms"] == 0.00229
    assert d["host_ms"] == {
        "input": 0.001,
        "sync": 0.0004,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.00089,
    }
    assert d["waits"][0] == {
        "kind": "input",
        "cause": None,
        "site": "train.py:10",
        "start_ms": 0.00011,
        "ms": 0.001,
    }
    assert [w["kind"] for w in d["waits"]] == [INPUT, SYNC]


def test_a_pageable_copy_is_a_copy_wait_and_a_graph_blocker():
    line = _Line(7)
    clock = StepClock(start_ns=0)
    clock.line(line).launch_ns += 900
    copy = profilers.Transfer("h2d", 4096, True, True, None, "cpu", "cuda:0")
    charge_transfer(clock, line, copy, 600, 100)
    clock.last_ns, clock.last_line = 900, line
    step = clock.close(1000)
    rec = step.lines["train.py:7"]
    assert (rec.launch_ns, rec.copy_ns, rec.pageable) == (400, 600, 1)
    d = breakdown(step)
    assert d["verdict"] == "copy-bound"
    assert d["shares_pct"]["copy"] == 60.0 and d["shares_pct"]["launch"] == 40.0
    assert COPY in d["host_ms"]


def test_the_run_keeps_the_newest_steps_and_sums_them_all():
    line = _Line(3)
    clock = StepClock(start_ns=0, keep=2)
    for k in range(5):
        clock.line(line).launch_ns += 100
        clock.last_ns, clock.last_line = (k + 1) * 100, line
        clock.close((k + 1) * 100)
    assert [s.step for s in clock.steps] == [3, 4]
    run = clock.run(550)  # 50 ns of the open step
    assert run.lines["train.py:3"].launch_ns == 550 and run.step == 5


class _Sleepy(Dataset[torch.Tensor]):
    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.ones(4)


SLEEP_S = 0.05  # well above a loaded 2-core machine's host work per step
STEPS = 6


def _train(loader: Any, model: torch.nn.Module, opt: Any, per_step: list[float]) -> int:
    start = time.perf_counter()
    for x in loader:  # the line that pulls the batch
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        now = time.perf_counter()
        per_step.append(now - start)
        start = now
    return _train.__code__.co_firstlineno + 2


def _plain_and_profiled() -> tuple[list[float], Report, int]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_Sleepy(STEPS, SLEEP_S), batch_size=1)
    plain: list[float] = []
    _train(loader, model, opt, plain)
    with profilers.profile() as prof:
        for_line = _train(loader, model, opt, [])
    return plain, prof.report(), for_line


def test_a_sleepy_loader_is_input_bound_at_the_for_line_and_the_stated_step_is_a_plain_one():
    errors = []
    for _attempt in range(3):
        plain, report, for_line = _plain_and_profiled()
        time_ = report.time
        assert time_ is not None and time_["steps_closed"] == STEPS
        where = f"tests/test_time_host.py:{for_line}"
        # the first step also holds the profile's start (its calibration): the rest are judged
        for step in time_["steps"][1:]:
            assert step["verdict"] == "input-bound"
            top = step["lines"][0]
            assert top["site"] == where
            # time.sleep never returns early: each step waited at least the sleep, there.
            assert top["input_ms"] >= SLEEP_S * 1000
            assert step["host_ms"]["input"] == top["input_ms"]
        assert problem(report.to_dict()) is None
        assert Report.from_dict(report.to_dict()).time == report.time
        # NB: the stated tolerance: the median step an unprofiled run would take (wall less
        # the profiler's own time; the first step, which starts the profile, left out) is
        # within 10% of the median step of a plain run of the same loop. A loaded machine's
        # sleeps overshoot by several ms at random: up to three tries, each one whole.
        stated = statistics.median(s["wall_unprofiled_ms"] for s in time_["steps"][1:])
        measured = statistics.median(plain[1:]) * 1000
        if abs(stated - measured) <= 0.10 * measured:
            return
        errors.append((stated, measured))
    raise AssertionError(f"stated vs plain median step (ms), each try: {errors}")


SPIN_S = 0.12
"""Long enough for the gap sampler to name the spin's lines in every step (profilers/timing/
gaps.py: a gap over 50-100 ms is named whole; a shorter one only when a reading falls in it)."""


def _spin_steps(n: int) -> tuple[set[int], int]:
    x = torch.ones(8)
    for _ in range(n):
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:  # host work of known cost, in Python
            pass
        x = x + 1  # the op whose launch that host work led up to
        profilers.step()
    first = _spin_steps.__code__.co_firstlineno
    return {first + 3, first + 4, first + 5}, first + 6  # the spin's own lines; the op's


def test_a_host_loop_of_known_cost_is_host_bound_at_its_lines():
    # NB: no op ran on a GPU, so nothing was launched: host-bound, never launch-bound
    with profilers.profile(kernel_timing=True) as prof:
        spin, op = _spin_steps(4)
    time_ = prof.report().time
    assert time_ is not None and time_["steps_closed"] == 4
    for step in time_["steps"][1:]:  # the first step also holds the profile's start
        assert step["verdict"] == "host-bound"
        ms = {int(d["site"].rsplit(":", 1)[1]): d["launch_ms"] for d in step["lines"]}
        assert max(ms, key=ms.__getitem__) in spin  # the stack sampled in the gap
        # tolerance 10%: a reading's share of the gap may go to the op's line, not more
        assert sum(ms.get(n, 0.0) for n in spin) >= 0.9 * SPIN_S * 1000
        assert ms.get(op, 0.0) <= 0.1 * SPIN_S * 1000 + 1.0  # + the op's own launch
        assert step["shares_pct"]["launch"] >= 90.0
        assert "graph_blockers" not in step  # CUDA graphs: only for launches


def test_on_the_fast_path_the_lines_of_host_work_come_from_the_stack_sampler():
    with profilers.profile(kernel_timing=False) as prof:
        spin, op = _spin_steps(4)
    time_ = prof.report().time
    assert time_ is not None and time_["lines_measured"] is False
    for step in time_["steps"][1:]:  # the first step also holds the profile's start
        assert step["verdict"] == "host-bound"
        ms = {d["site"].rsplit(":", 1)[-1]: d["launch_ms"] for d in step["lines"]}
        # tolerance 10%: the stretch from the last reading to the op may go elsewhere (the
        # readings come every 10 ms), as may the op's cast of 1 (ours) and its launch
        assert sum(ms.get(str(n), 0.0) for n in spin) >= 0.9 * SPIN_S * 1000, (ms, spin, op)
        assert ms.get("(between counted ops)", 0.0) <= 0.1 * SPIN_S * 1000


def test_the_fast_path_keeps_the_host_half():
    loader = DataLoader(_Sleepy(3, SLEEP_S), batch_size=1)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profilers.profile(kernel_timing=False) as prof:
        for_line = _train(loader, model, opt, [])
    report = prof.report()
    assert report.options.counting == "copies"
    time_ = report.time
    assert time_ is not None and time_["lines_measured"] is False
    for step in time_["steps"][1:]:  # the first also holds the fast path's start (~35 ms)
        assert step["verdict"] == "input-bound"
        assert step["lines"][0]["site"] == f"tests/test_time_host.py:{for_line}"
        assert step["lines"][0]["input_ms"] >= SLEEP_S * 1000


def test_time_steps_0_measures_nothing():
    with profilers.profile(time_steps=0) as prof:
        torch.ones(2).add(1)
    assert prof.report().time is None
    assert "time" not in prof.report().to_dict()


def test_on_the_fast_path_a_counted_wait_keeps_its_line_and_the_rest_has_none():
    line = _Line(21)
    clock = StepClock(start_ns=0, lines_measured=False)
    # A pageable host->GPU copy reached its kernel at 1000, ran 1010..1610, left at 1620.
    copy = profilers.Transfer("h2d", 64, True, False, None, "cpu", "cuda:0")
    timed_on_fast_path(clock, line, copy, 1000, 1010, 1610, 1620)
    step = clock.close(2000)
    assert (step.lines["train.py:21"].copy_ns, step.lines["train.py:21"].launch_ns) == (600, 0)
    assert step.lines["train.py:21"].pageable == 1
    # The host work before and after it has no line there: 1000 + 380.
    assert step.lines[UNATTRIBUTED].launch_ns == 1380 and step.own_ns == 20
    assert [w.kind for w in step.waits] == [COPY]


def test_on_the_fast_path_calls_it_takes_and_does_not_count_are_the_profilers_own_time():
    clock = StepClock(start_ns=0, lines_measured=False, outside_ns=50)
    # A Python number's cast entered the kernel at 1000 and left at 1200: its 200 ns and the
    # 50 around the kernel are ours; a copy then reached its kernel at 2000 (ran to 2600).
    untimed(clock, 200, 1200)
    copy = profilers.Transfer("h2d", 64, True, False, None, "cpu", "cuda:0")
    timed_on_fast_path(clock, _Line(21), copy, 2000, 2010, 2600, 2620)
    # Never more than the whole gap: a call of 900 ns and 50 around it, 400 ns after the last.
    untimed(clock, 900, 3020)
    step = clock.close(4000)
    # ours: 250 + (50 around the copy's kernel + 10 + 20) + 400
    assert step.own_ns == 730
    # the script's host work with no line: 2000 - 250 - 50 before the copy, 4000 - 3020 after
    assert step.lines[UNATTRIBUTED].launch_ns == 1700 + 980
    assert step.lines["train.py:21"].copy_ns == 590


def test_the_fast_paths_calls_on_python_numbers_are_taken_out_of_the_stated_step(monkeypatch):
    from profilers.counting import calibrate

    # The cost around each call, as calibrated, fixed at a known 2 µs (of about 10 on this
    # box, the rest timed in the kernel): 100 calls a step
    monkeypatch.setattr(calibrate, "fast_path_outside_ns", lambda *a, **k: 2_000)
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):
            y = torch.ones(8)
            for _ in range(100):
                y = y + 1  # the cast of 1 to float32: a call the fast path takes
            profilers.step()
    time_ = prof.report().time
    assert time_ is not None
    for step in time_["steps"][1:]:
        # at least the 0.2 ms known; the rest is the kernel's own timed run (a few µs a call)
        assert 0.2 <= step["wall_ms"] - step["wall_unprofiled_ms"] < step["wall_ms"]


class _PassThrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_the_fast_paths_cost_around_a_call_is_calibrated_where_it_runs():
    recorder = Recorder(UserCode(), kernel_timing=False)
    recorder.counting = "copies"
    kernels = CountingKernels(recorder)
    with ExitStack() as stack:
        kernels.install(stack)
        clock = start_clock(recorder, 4, kernels.on_thread)
        # a mode of its own in place of the key: slower than bare, but no call reached the
        # kernel: nothing of ours to measure (not the mode's cost)
        off = fast_path_outside_ns(recorder, _PassThrough)
    # a call boxed into Python and back: more than nothing, less than a sleep (2-core box: ~5 µs)
    assert 100 < clock.outside_ns < 200_000 and off == 0


def test_a_run_with_no_gpu_work_is_never_said_to_launch():
    import io

    from rich.console import Console

    from gpuwatch.analysis.hints import hints
    from gpuwatch.output.text import summary

    with profilers.profile(kernel_timing=True) as prof:
        _spin_steps(3)
    report = prof.report()
    out = io.StringIO()
    Console(width=200, file=out).print(summary(report, analyze(report)))
    text = out.getvalue()
    assert "host-bound:" in text and "host work (Python + CPU ops)" in text
    assert "launch-bound" not in text and "(Python + launch)" not in text
    assert not any("CUDA graph" in str(h) for h in hints(report))


def test_where_the_profilers_own_time_outweighs_the_scripts_the_summary_says_not_all_is_out():
    import io

    from rich.console import Console

    from gpuwatch.output.text import summary

    with profilers.profile(kernel_timing=True) as prof:
        _spin_steps(3)
    r = prof.report()
    assert r.time is not None
    run, steps = r.time.run, r.time.after_first
    assert steps is not None  # the figures are per step, over the steps after the first

    def said(step_share: float, run_share: float = 0.0) -> str:
        assert r.time is not None and steps is not None
        time = r.time.replace(  # the rule: own vs the rest, per step
            after_first=steps.replace(own_ms=step_share * steps.wall_ms),
            run=run.replace(own_ms=run_share * run.wall_ms),
        )
        edited = r.replace(time=time)
        out = io.StringIO()
        Console(width=400, file=out).print(summary(edited, analyze(edited)))
        return out.getvalue()

    text = said(0.75)
    assert "taken out of the figures, not all of it: per step it was 3.0x the script's" in text
    assert "up to 1.6x a plain run's" in text
    # NB: a third of a step is the profiler's: a sub-ms step then read 1.3x (observer_effect)
    text = said(1 / 3)
    assert "not all of it: per step it was 0.5x the script's own time" in text
    assert "up to 1.4x a plain run's" in text
    # step 0's setup (imports, the model) does not hide a loop the profiler doubled
    assert "per step it was 1.0x" in said(0.5, run_share=0.01)
    text = said(0.05, run_share=0.9)
    assert "is taken out of the figures" in text and "not all of it" not in text


def test_a_report_read_back_from_json_holds_typed_breakdowns_that_write_the_same_json():
    from profilers.sections import Breakdown, LineCost

    with profilers.profile(kernel_timing=True) as prof:
        _spin_steps(3)
    r = prof.report()
    back = Report.from_dict(json.loads(r.to_json()))
    assert back.time is not None and back.time.after_first is not None
    assert isinstance(back.time.run, Breakdown) and isinstance(back.time.steps[0], Breakdown)
    assert isinstance(back.time.run.lines[0], LineCost)
    assert back.time.after_first.steps == 2  # the steps after the first, as written
    assert back.to_json() == r.to_json()
