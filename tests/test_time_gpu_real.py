"""The GPU half of the time view on a real GPU: ``torch.cuda._sleep`` gives GPU work of
known length; a step with an ``.item()`` after it, a step with a pageable copy and a step fed by
a slow loader must each get their verdict at their line, with busy and idle time within 5% of
what CUDA events around the whole step (and around each sleep) say.

Marked ``gpu``; skipped without CUDA (.ci/gpu_checks.sh runs them: ``pytest -m gpu``). The exact
arithmetic, on a stand-in GPU, is in tests/test_time_gpu.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import profilers
from tests.profiler_helpers import line_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STEPS = 5
"""Steps per run; the first (the device's anchor, the allocator's growth) is not compared."""

LOADER_S = 0.02


def _line(tag: str) -> str:
    """The end of the ``file:line`` key of the line marked ``# @tag`` (the file's path is as
    the profiler shortens it)."""
    return f"test_time_gpu_real.py:{line_of(tag)}"


def _event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class Truth:
    """CUDA events around a whole step and around each sleep in it (the reference)."""

    def __init__(self) -> None:
        self.cycles_per_ms = _cycles_per_ms()
        self.steps: list[tuple[Any, Any, list[tuple[Any, Any]]]] = []
        self.begin: Any = None
        self.sleeps: list[tuple[Any, Any]] = []

    def start(self) -> None:
        self.begin, self.sleeps = _event(), []
        self.begin.record()

    def sleep(self, ms: float) -> None:
        a, b = _event(), _event()
        a.record()
        torch.cuda._sleep(int(ms * self.cycles_per_ms))
        b.record()
        self.sleeps.append((a, b))

    def end(self) -> None:
        end = _event()
        end.record()
        self.steps.append((self.begin, end, self.sleeps))

    def step(self, k: int) -> tuple[float, float, float]:
        """Step ``k``'s wall, busy and idle ms as the events say."""
        begin, end, sleeps = self.steps[k]
        wall = float(begin.elapsed_time(end))
        busy = sum(float(a.elapsed_time(b)) for a, b in sleeps)
        return wall, busy, wall - busy


def _cycles_per_ms() -> float:
    torch.cuda._sleep(1000)
    a, b = _event(), _event()
    a.record()
    torch.cuda._sleep(20_000_000)
    b.record()
    b.synchronize()
    return 20_000_000 / float(a.elapsed_time(b))


def _spin(seconds: float) -> None:
    """Host work of a known length (Python, no GPU launch)."""
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def _check(report: profilers.Report, truth: Truth) -> list[dict[str, Any]]:
    """The compared steps: busy and idle each within 5% of the step's time as CUDA events
    around the whole step say. NB: work the dispatch mode never sees (``torch.cuda._sleep``) is
    seen from when the next op was queued, a lower bound by the host's µs between the two."""
    assert report.time is not None
    steps = report.time["steps"]
    assert len(steps) == STEPS and report.time["gpu"].startswith("measured")
    for k in range(1, STEPS):
        gpu = steps[k]["gpu"]
        assert gpu is not None and gpu["measured"] == "measured", steps[k]
        wall, busy, idle = truth.step(k)
        for got, want in ((gpu["busy_ms"], busy), (gpu["idle_total_ms"], idle)):
            assert abs(got - want) <= 0.05 * wall, (k, gpu, wall, busy, idle)
    return steps[1:]


def _top_line(step: dict[str, Any], cause: str, tag: str) -> bool:
    """Whether the line charged the most idle time is ``tag``'s, for ``cause``."""
    top = step["gpu"]["idle_lines"][0]
    return bool(top["cause"] == cause and str(top["site"]).endswith(_line(tag)))


def test_a_sync_after_gpu_work_charges_its_refill_to_the_item_line():
    # 10 ms of GPU work, .item() waits for it, then 5 ms of the host's Python with the queue
    # empty: had the host not waited, those 5 ms would have run beside the 10 ms of work, so
    # they are the sync's (up to the work it waited for). 12 ms busy: GPU-bound.
    truth = Truth()
    one = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    with profilers.profile() as prof:
        for _ in range(STEPS):
            truth.start()
            truth.sleep(10)
            one.item()  # @item
            _spin(0.005)  # the GPU idles: the host refills it only after the sync
            truth.sleep(2)
            one.item()  # @last
            truth.end()
            profilers.step()
    torch.cuda.synchronize()
    for step in _check(prof.report(), truth):
        wall, _busy, idle = step["gpu"]["wall_ms"], step["gpu"]["busy_ms"], step["gpu"]["idle_ms"]
        assert step["verdict"] == "GPU-bound", step
        assert _top_line(step, "sync", "item"), step
        assert abs(idle["sync"] - 5.0) <= 0.05 * wall, step


def test_a_pageable_copy_is_copy_bound_at_the_copy_line():
    truth = Truth()
    host = torch.ones(32 * 1024 * 1024)  # 128 MiB of pageable memory
    one = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    with profilers.profile() as prof:
        for _ in range(STEPS):
            truth.start()
            host.to("cuda")  # @copy
            truth.sleep(2)
            one.item()  # @last
            truth.end()
            profilers.step()
    torch.cuda.synchronize()
    for step in _check(prof.report(), truth):
        assert step["verdict"] == "copy-bound", step
        assert _top_line(step, "copy", "copy"), step


class _Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(LOADER_S)
        return torch.ones(4)


def test_a_slow_loader_is_input_bound_at_the_for_line():
    truth = Truth()
    one = torch.ones(1, device="cuda")
    loader = DataLoader(_Slow(), batch_size=None)
    torch.cuda.synchronize()
    with profilers.profile() as prof:
        truth.start()
        for _batch in loader:  # @for
            truth.sleep(5)
            one.item()  # @last
            truth.end()
            profilers.step()
            truth.start()
    torch.cuda.synchronize()
    for step in _check(prof.report(), truth):
        assert step["verdict"] == "input-bound", step
        assert _top_line(step, "input", "for"), step


def test_a_step_of_gpu_work_is_gpu_bound():
    truth = Truth()
    one = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    with profilers.profile() as prof:
        for _ in range(STEPS):
            truth.start()
            truth.sleep(20)
            one.item()  # @last
            truth.end()
            profilers.step()
    torch.cuda.synchronize()
    for step in _check(prof.report(), truth):
        assert step["verdict"] == "GPU-bound", step
