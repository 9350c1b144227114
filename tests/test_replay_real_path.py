"""The replay on a GPU, end to end without one (replayed as recorded, a step must take
its measured time): the profiler's real path (the hot path's records in
timing/oplog.py, the CUDA timer of timing/cuda_events.py writing each op's event time into its
record, timing/replayed.py replaying the kept steps) over a stand-in CudaApi that behaves as a
GPU does in real time: one stream runs the ops in order, each for its planned time; an event
completes when the stream reaches it; an op the host waits for (a blocking copy, ``.item()``)
holds the host until the stream has done it. What a GPU adds is .ci/check_replay.py's run."""

from __future__ import annotations

import importlib.util
import time
from itertools import cycle
from pathlib import Path
from statistics import median
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

import profilers
from profilers.timing.cuda_events import CudaTimer, TorchCuda
from profilers.timing.oplog import GPU_NS
from profilers.timing.replay import replay
from tests.profiler_helpers import fake_mode, never_pinned

MS = 1_000_000


def _check_replay() -> Any:
    """.ci/check_replay.py, the GPU machine's check of the same (``.ci`` is no package)."""
    path = Path(__file__).resolve().parent.parent / ".ci" / "check_replay.py"
    spec = importlib.util.spec_from_file_location("check_replay", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAN_NS = (10 * MS, 20 * MS, 20 * MS, 20 * MS, MS // 2)
"""Each step's ops in order: the copy in, a multiply, an add, a sum, the ``.item()``. NB: long
enough that the host's few ms off the CPU on a busy machine stay well under 10% of a step."""


def _wait_until(deadline_ns: int) -> None:
    """Holds the host until ``deadline_ns`` (a sleep, then a spin for the last half ms: a sleep
    on a busy machine oversleeps)."""
    left = deadline_ns - time.perf_counter_ns()
    if left > MS // 2:
        time.sleep((left - MS // 2) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        pass


class TimedEvent:
    def __init__(self) -> None:
        self.at_ns = 0

    def query(self) -> bool:
        return time.perf_counter_ns() >= self.at_ns

    def elapsed_time(self, end: TimedEvent) -> float:
        return (end.at_ns - self.at_ns) / 1e6


class RealTimeGpu(TorchCuda):
    """One stream in real time: the timer records a start and an end event around each op;
    the start runs when the stream is free (or at once), the op's kernel right after it for
    its planned time, the end when the kernel is done (or when the host records it, if
    later). ``hold_host``: the next op is one the host waits for (:class:`HostWaits`)."""

    def __init__(self, plan_ns: tuple[int, ...]) -> None:
        super().__init__()
        self.tensor_types = (torch.Tensor, torch.nn.Parameter, FakeTensor)
        self._current = lambda index: (0, index, 1)
        self.record = self._record
        self.plan = cycle(plan_ns)
        self.tail_ns = 0
        self.kernel_end_ns = 0
        self.started = False
        self.hold_host = False
        self.hold_until_ns: int | None = None
        self.drained = False

    def _record(self, event: TimedEvent, stream: Any) -> None:
        now = time.perf_counter_ns()
        if self.drained:  # the time view's anchor, recorded on the stream it just drained
            self.drained = False
            event.at_ns = max(now, self.tail_ns)
            return
        if not self.started:  # a start event: the stream reaches it when free
            event.at_ns = max(now, self.tail_ns)
            self.kernel_end_ns = event.at_ns + next(self.plan)
            if self.hold_host:
                self.hold_host, self.hold_until_ns = False, self.kernel_end_ns
        else:  # an end event: after the op's kernel
            event.at_ns = self.tail_ns = max(now, self.kernel_end_ns)
        self.started = not self.started

    def make_stream(self, key: tuple[int, int, int]) -> Any:
        return key

    def current_device(self) -> int:
        return 0

    def new_event(self) -> TimedEvent:
        return TimedEvent()

    def synchronize(self, device: int) -> None:
        _wait_until(self.tail_ns)
        self.drained = True


class HostWaits(TorchDispatchMode):
    """Below the profiler's mode (entered first), so inside the op's run as the profiler times
    it: the op the host waits for holds the host until the stream has done it, as a blocking
    copy or ``.item()`` does inside its CUDA call."""

    def __init__(self, gpu: RealTimeGpu) -> None:
        super().__init__()
        self.gpu = gpu

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        until, self.gpu.hold_until_ns = self.gpu.hold_until_ns, None
        if until is not None:
            _wait_until(until)
        return out


def test_on_a_gpu_the_replay_gets_each_ops_event_time_and_gives_back_the_measured_step(
    monkeypatch: pytest.MonkeyPatch,
):
    # NB: the timer reads completed events every op, as on a GPU that keeps up: the records
    # must get their times while the run goes, not only from the wait at its end
    monkeypatch.setattr(CudaTimer, "RESOLVE_EVERY", 1)
    gpu = RealTimeGpu(PLAN_NS)
    with (
        HostWaits(gpu),
        profilers.profile(cuda=gpu, is_pinned=never_pinned, what_if=True) as prof,
        fake_mode(),
    ):
        host = torch.randn(256, 256)
        for _ in range(5):
            gpu.hold_host = True  # a blocking copy from pageable memory
            x = host.to("cuda:0")
            y = (x * 2 + 1).sum()
            gpu.hold_host = True  # .item() waits for the stream
            y.item()
            profilers.step()
        log = prof._log
        assert log is not None
        first = list(log.steps)[0]
        # before the profile's end; the last record is the host's time up to the step's end
        assert [r[GPU_NS] > 0 for r in first.records] == [True] * 5 + [False]
    r = prof.report()
    assert r.time is not None and r.what_if is not None
    walls = {d["step"]: d["wall_ms"] for d in r.time["steps"]}
    kept = list(log.steps)
    assert [s.step for s in kept] == [0, 1, 2, 3, 4]  # all five: fewer than KEEP_STEPS
    kept = kept[1:]  # the typical step's group: the steps after the first (its setup)
    for step in kept:
        *ops, end = step.ops()
        assert end.kind == "host"
        assert [(o.kind, o.sync) for o in ops] == [
            ("h2d", "copy_to_device"),
            ("kernel", None),
            ("kernel", None),
            ("kernel", None),
            ("d2h", "item"),
        ]
        # each op's GPU time is its CUDA events': at least its plan (an op the host waits for
        # ends when the host, back, records its end event, as on a GPU)
        assert all(o.gpu_ns >= p for o, p in zip(ops, PLAN_NS, strict=True)), step.step
        # a GPU-bound step: about the GPU's 70.5 ms, measured on the host's clock
        assert walls[step.step] >= sum(PLAN_NS) / 1e6
    # Replayed as recorded, each step gives back its measured wall time (the median of their
    # ratios: a step whose host was off the CPU for long once may miss by more).
    ratios = [replay(s.ops()).step_ns / 1e6 / walls[s.step] for s in kept]
    assert median(ratios) == pytest.approx(1.0, rel=0.10), ratios
    # the kernels queued behind nothing the host waits for: their plan to the ns (the median
    # over the steps: a busy machine may hold the host past one kernel's end now and then)
    for i in (1, 2, 3):
        assert median(s.ops()[i].gpu_ns for s in kept) == PLAN_NS[i]
    w = r.what_if
    assert w["measured"] == "replayed" and w["steps_median"] == 4
    measured_ms = median(walls[s.step] for s in kept)
    assert w["as_recorded_ms"] == pytest.approx(measured_ms, rel=0.10)
    # the GPU machine's check reads the same figures from the report's JSON
    lines, ok = _check_replay().compare(r.to_dict())
    assert ok, lines
    assert lines[0].startswith("  steps 1..4 (4; 5 ops a step, 0 dropped)")
    assert lines[1] == f"  measured step (host wall, median):      {measured_ms:10.3f} ms"


def test_the_gpu_check_fails_a_report_with_nothing_to_compare():
    check = _check_replay()
    lines, ok = check.compare({"what_if": None, "time": None})
    assert not ok and "nothing to compare" in lines[0]
    lines, ok = check.compare({"what_if": {"measured": "predicted"}, "time": {"steps": []}})
    assert (ok, lines) == (False, ["  what_if is 'predicted', not replayed from CUDA events"])
    report = {
        "what_if": {"measured": "replayed", "step": 4, "steps_median": 2, "ops": 3,
                    "ops_dropped": 0, "as_recorded_ms": 12.0, "unprofiled_ms": 11.0},
        "time": {"steps": [{"step": n, "wall_ms": 10.0, "wall_unprofiled_ms": 9.5}
                           for n in (2, 3, 4)]},
    }  # fmt: skip
    lines, ok = check.compare(report)  # 12 against 10: 20% off
    assert not ok and lines[0].startswith("  steps 3..4 (2;")
    assert lines[2].endswith("+20.0%   <-- off by more than 10%")


def test_host_work_at_the_end_of_a_step_is_replayed_in_that_step(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(CudaTimer, "RESOLVE_EVERY", 1)
    gpu = RealTimeGpu(PLAN_NS)
    with (
        HostWaits(gpu),
        profilers.profile(cuda=gpu, is_pinned=never_pinned, what_if=True) as prof,
        fake_mode(),
    ):
        host = torch.randn(256, 256)
        for i in range(4):
            gpu.hold_host = True
            x = host.to("cuda:0")
            y = (x * 2 + 1).sum()
            gpu.hold_host = True
            y.item()
            if i == 2:
                _wait_until(time.perf_counter_ns() + 40 * MS)  # the host logs, at step 2's end
            profilers.step()
    r = prof.report()
    assert r.time is not None and prof._log is not None
    walls = {d["step"]: d["wall_ms"] for d in r.time["steps"]}
    replayed = {s.step: replay(s.ops()).step_ns / 1e6 for s in prof._log.steps}
    # step 2's wall has the 40 ms, step 3's does not: each replay must say the same
    assert replayed[2] == pytest.approx(walls[2], rel=0.10)
    assert replayed[3] == pytest.approx(walls[3], rel=0.10)
