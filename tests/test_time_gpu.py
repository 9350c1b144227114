"""The GPU half of the time view measured with CUDA events, exact on the CPU: a
stand-in GPU runs each op for a duration the test decides, on the host clock the test moves,
and its events say when. The real CUDA timer, step clock, op log and GPU timeline place each op
on the host's clock and charge each step's idle time to its cause and line, as the profiler's
hot path drives them (profilers/counting/dispatch.py). Real GPUs: tests/test_time_gpu_real.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import profilers
from profilers.stats import OpCount
from profilers.timing.charge import charge_transfer
from profilers.timing.cuda_events import CudaTimer
from profilers.timing.gpu_time import COMPACT_AT, GpuTimeline, compact, start_gpu_time
from profilers.timing.idle import END_OF_STEP, GpuInterval, charge
from profilers.timing.timeline import INPUT, StepClock
from profilers.timing.verdict import last_step, time_section

MS = 1_000_000
"""ns per ms: the scenarios are written in ms."""


class _Line:
    def __init__(self, line: int) -> None:
        self.file, self.line = "train.py", line


class SimStream:
    def __init__(self) -> None:
        self.free_ns = 0
        """When the stream has run everything queued on it so far."""


class SimEvent:
    def __init__(self, gpu: SimGpu) -> None:
        self.gpu = gpu
        self.at_ns: int | None = None

    def query(self) -> bool:
        return self.at_ns is not None and self.at_ns <= self.gpu.now

    def elapsed_time(self, end: SimEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("event not complete")  # as CUDA says it
        assert self.at_ns is not None and end.at_ns is not None
        return (end.at_ns - self.at_ns) / MS


class SimGpu:
    """One GPU, one stream, on the host clock ``now`` (ns): an event runs when the host has
    recorded it and the stream has run what was queued before it."""

    def __init__(self) -> None:
        self.now = 0
        self.stream = SimStream()
        self.synchronized: list[int] = []
        self.record = self._record

    def stream_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int]:
        return self.stream, 0

    def new_event(self) -> SimEvent:
        return SimEvent(self)

    def _record(self, event: SimEvent, stream: SimStream) -> None:
        event.at_ns = stream.free_ns = max(self.now, stream.free_ns)

    def synchronize(self, device: int) -> None:
        self.synchronized.append(device)
        self.now = max(self.now, self.stream.free_ns)


class Run:
    """The hot path's calls per op, on a stand-in GPU and an injected host clock."""

    def __init__(self) -> None:
        self.gpu = SimGpu()
        self.timer = CudaTimer(self.gpu)
        self.timer.now = lambda: self.gpu.now
        self.clock = StepClock(start_ns=0)
        self.recorder = SimpleNamespace(timer=self.timer, own_sync=False)
        line = start_gpu_time(self.recorder, self.clock)
        assert line is not None
        self.line: GpuTimeline = line

    def op(self, lineno: int, gpu_ms: float, host_ms: float = 0.0, found: Any = None) -> None:
        """An op at ``lineno`` that runs ``gpu_ms`` on the GPU, launched at once (or, for a sync:
        ``found`` with a sync or a blocking copy, the host waits until it has run); then the
        host's Python runs ``host_ms`` before whatever comes next."""
        line, t_in = _Line(lineno), self.gpu.now
        began = self.timer.begin((), {})
        assert began is not None
        self.gpu.stream.free_ns = began[2].at_ns + round(gpu_ms * MS)
        if found is not None:  # the host waits until the stream has run it
            self.gpu.now = max(self.gpu.now, self.gpu.stream.free_ns)
        t_ret = self.gpu.now
        timed = self.timer.end(began, OpCount())
        clock = self.clock
        clock.line(line).launch_ns += t_in - clock.last_ns + t_ret - t_in
        clock.last_line, clock.ops, clock.last_ns = line, clock.ops + 1, t_ret
        if found is not None:
            charge_transfer(clock, line, found, t_ret - t_in, t_in, timed)
        # NB: what dispatch() gives every timed op; the GPU timeline needs no replay record
        timed.line, timed.found, timed.queued_ns = line, found, t_in
        self.timer.queue(timed)
        self.gpu.now += round(host_ms * MS)

    def untimed(self, gpu_ms: float) -> None:
        """GPU work the dispatch mode never sees (``torch.cuda._sleep``): no events."""
        stream = self.gpu.stream
        stream.free_ns = max(self.gpu.now, stream.free_ns) + round(gpu_ms * MS)

    def python(self, ms: float) -> None:
        self.gpu.now += round(ms * MS)

    def input(self, line: int, ms: float) -> None:
        t = self.gpu.now
        self.clock.wait(_Line(line), INPUT, None, t, t, t + round(ms * MS), t + round(ms * MS))
        self.gpu.now += round(ms * MS)

    def close(self) -> None:
        self.clock.close(self.gpu.now)

    def section(self) -> dict[str, Any]:
        self.timer.resolve()
        return time_section(self.clock, self.gpu.now)


ITEM = profilers.Transfer(None, sync="item")
PAGEABLE = profilers.Transfer("h2d", 4096, pageable=True, sync="copy_to_device")


def _lines(gpu: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(d["cause"], d["site"]): round(d["ms"], 9) for d in gpu["idle_lines"]}


def _idle(gpu: dict[str, Any]) -> dict[str, float]:
    return {k: round(v, 9) for k, v in gpu["idle_ms"].items() if v}


def test_a_sync_is_charged_the_gpu_work_it_waited_for_and_the_python_past_it_is_launch():
    run = Run()
    run.op(8, gpu_ms=2, host_ms=0.1)  # A: the GPU runs it 0..2
    run.op(9, gpu_ms=0, found=ITEM)  # .item(): the host waits 0.1..2, for 1.9 ms of A
    run.python(6)  # the GPU idles 2..8 while the host runs its own Python
    run.op(12, gpu_ms=2)  # B: 8..10
    run.python(2)
    run.close()
    t = run.section()
    step = t["steps"][0]
    gpu = step["gpu"]
    assert gpu["measured"] == "measured" and gpu["busy_ms"] == 4.0 and gpu["wall_ms"] == 10.0
    # Without the .item() the host would have run 1.9 ms of that Python beside A: the sync's.
    # The other 4.1 ms would have left the GPU idle all the same: launch, at B's line.
    assert _idle(gpu) == {"sync": 1.9, "launch": 4.1}
    assert gpu["idle_lines"] == [
        {"site": "train.py:12", "cause": "launch", "sync_cause": None, "ms": 4.1},
        {"site": "train.py:9", "cause": "sync", "sync_cause": "item", "ms": 1.9},
    ]
    assert step["verdict"] == "launch-bound" and step["shares_pct"]["sync"] == 19.0
    assert gpu["idle_slices"] == [
        {"start_ms": 2.0, "ms": 1.9, "cause": "sync", "sync_cause": "item", "site": "train.py:9"},
        {"start_ms": 3.9, "ms": 4.1, "cause": "launch", "sync_cause": None, "site": "train.py:12"},
    ]
    # the busy intervals themselves, for the joules spent between them (gpuwatch/analysis/energy.py)
    start = step["start_ms"]
    assert [[a - start, b - start] for a, b in gpu["busy_spans_ms"]] == [[0.0, 2.0], [8.0, 10.0]]
    # one wait of the profiler's own for the device's first anchor, none per op
    assert run.gpu.synchronized == [0] and run.line.unplaced == 0
    # the .item() re-anchored the device: its end event, at the host time its sync returned
    assert run.line.anchored == 2 and run.line.anchors[0][0] == 2 * MS
    assert t["gpu"].startswith("measured: CUDA events")
    assert t["run"]["verdict"] == "launch-bound" and t["run"]["gpu"]["busy_ms"] == 4.0


def test_a_pageable_copy_is_copy_bound_at_the_copys_line():
    run = Run()
    run.op(5, gpu_ms=5, found=PAGEABLE)  # the host is stuck in the copy 0..5
    run.python(0.5)  # its refill
    run.op(6, gpu_ms=1)  # 5.5..6.5
    run.python(1)
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    # NB: the blocking copy's own interval is copy time, not busy (profilers/timing/idle.py)
    assert gpu["busy_ms"] == 1.0 and _idle(gpu) == {"copy": 5.5}
    assert _lines(gpu) == {("copy", "train.py:5"): 5.5}
    assert step["verdict"] == "copy-bound" and step["shares_pct"]["copy"] == 84.62
    # the host half saw a sync (copy_to_device): the GPU half names what the GPU waited behind
    assert step["host_ms"]["sync"] == 5.0


def test_a_slow_loader_is_input_bound_at_the_for_line():
    run = Run()
    run.input(5, 8)  # for x in loader: 0..8
    run.python(0.2)
    run.op(6, gpu_ms=2)  # 8.2..10.2
    run.python(2)
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    # the GPU idled through the wait: the 0.2 ms of Python after it is launch, at the op's line
    assert gpu["busy_ms"] == 2.0 and _idle(gpu) == {"input": 8.0, "launch": 0.2}
    assert _lines(gpu) == {("input", "train.py:5"): 8.0, ("launch", "train.py:6"): 0.2}
    assert step["verdict"] == "input-bound"


def test_a_busy_gpu_is_gpu_bound():
    run = Run()
    for line in (20, 21, 22):
        run.op(line, gpu_ms=3, host_ms=0.1)  # queued at 0, 0.1, 0.2: back to back 0..9
    run.op(23, gpu_ms=0, found=ITEM)  # waits 0.3..9
    run.python(0.1)
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    assert gpu["busy_ms"] == 9.0 and _idle(gpu) == {"sync": 0.1}
    assert step["verdict"] == "GPU-bound" and step["shares_pct"]["busy"] == 98.9


def test_untimed_gpu_work_is_busy_time_seen_through_the_op_that_waited_behind_it():
    run = Run()
    run.op(8, gpu_ms=1, host_ms=0.1)  # 0..1
    run.untimed(5)  # torch.cuda._sleep: queued at 0.1, runs 1..6, no events of its own
    run.op(9, gpu_ms=0, found=ITEM)  # queued at 0.1, starts at 6: waits until then
    run.python(2)
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    assert gpu["busy_ms"] == 6.0 and _idle(gpu) == {"sync": 2.0}
    assert run.line.untimed_ns == 5 * MS and step["verdict"] == "GPU-bound"


def test_launch_idle_goes_to_the_line_queued_while_the_queue_was_empty():
    run = Run()
    for line in (30, 31, 32):
        run.op(line, gpu_ms=0.01, host_ms=1)  # each op 10 µs on the GPU, 1 ms on the host
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    assert round(gpu["busy_ms"], 9) == 0.03
    assert _lines(gpu) == {
        ("launch", "train.py:31"): 0.99,
        ("launch", "train.py:32"): 0.99,
        ("launch", END_OF_STEP): 0.99,
    }
    assert step["verdict"] == "launch-bound"


def test_a_steps_gpu_half_fills_in_once_its_events_complete():
    run = Run()
    run.op(8, gpu_ms=5, host_ms=1)  # the GPU runs it 0..5; the step ends at 1
    run.close()
    t = run.section()
    assert t["steps"][0]["gpu"] is None and t["steps"][0]["gpu_pending"] is True
    assert "still to come" in t["gpu"] and t["run"]["gpu"]["steps"] == 0
    assert last_step(run.clock) == {  # the live line: the host's figures until then
        "step": 0,
        "verdict": "launch-bound",
        "shares_pct": {"input": 0.0, "sync": 0.0, "copy": 0.0, "comm": 0.0, "launch": 100.0},
        "wall_unprofiled_ms": 1.0,
        "start_ms": 0.0,
        "end_ms": 1.0,
    }
    run.python(5)  # now 6: the op is done; the open step has 1..5 busy and 5..6 idle
    run.close()
    t = run.section()
    first, second = (s["gpu"] for s in t["steps"])
    assert first["busy_ms"] == 1.0 and first["idle_total_ms"] == 0.0
    assert second["busy_ms"] == 4.0 and _lines(second) == {("launch", END_OF_STEP): 1.0}
    assert t["steps"][0]["verdict"] == "GPU-bound" and "gpu_pending" not in t["steps"][1]
    assert t["run"]["gpu"]["busy_ms"] == 5.0 and t["run"]["gpu"]["steps"] == 2
    live = last_step(run.clock)
    assert live["step"] == 1 and live["gpu"] == {
        "measured": "measured",
        "busy_ms": 4.0,
        "idle_ms": {"input": 0.0, "sync": 0.0, "copy": 0.0, "comm": 0.0, "launch": 1.0},
    }


def test_the_run_covers_the_open_step_once_every_op_is_placed():
    run = Run()
    run.op(8, gpu_ms=2, host_ms=0.5)
    run.close()  # step 0: 0..0.5, all busy
    run.op(9, gpu_ms=0, found=ITEM)  # waits 0.5..2
    run.python(1)  # the open step: busy 0.5..2, idle 2..3 (the sync's refill)
    t = run.section()
    assert t["run"]["gpu"]["covers_open_step"] is True
    assert t["run"]["gpu"]["busy_ms"] == 2.0 and _idle(t["run"]["gpu"]) == {"sync": 1.0}
    assert t["run"]["gpu"]["wall_ms"] == t["run"]["wall_ms"] == 3.0


def test_the_profilers_own_time_comes_off_launch_idle_for_the_verdict_only():
    run = Run()
    run.op(8, gpu_ms=1, host_ms=0.5)
    run.python(3)
    run.clock.own_ns = 2 * MS  # the profiler's part of the host's 3.5 ms
    run.close()
    step = run.section()["steps"][0]
    gpu = step["gpu"]
    assert gpu["busy_ms"] == 1.0 and _idle(gpu) == {"launch": 2.5}  # as measured
    assert step["gpu_profiler_ms"] == 2.0  # at most the own time, at most the launch idle
    # the verdict over 1 busy + 0.5 launch: GPU-bound, not the profiler's launch-bound
    assert step["verdict"] == "GPU-bound" and step["shares_pct"]["busy"] == 66.67


def test_compacting_keeps_what_the_charge_reads():
    ops = [GpuInterval(i * 10, i * 10 + 15, 0, f"l{i % 3}") for i in range(50)]
    ops += [GpuInterval(600, 700, 1, "x"), GpuInterval(650, 660, 0, "y")]
    ops += [GpuInterval(800, 900, 0, "copy", held=True)]
    merged = compact(ops)
    assert [(o.start_ns, o.end_ns, o.line) for o in merged if not o.held] == [
        (0, 505, "l0"),
        (600, 700, "x"),
    ]
    for a, b in ((0, 1000), (100, 620), (505, 950)):
        assert charge(a, b, merged, []) == charge(a, b, ops, [])


def test_a_long_step_is_compacted_as_it_resolves_and_stays_exact():
    run = Run()
    n = COMPACT_AT + 500
    for i in range(n):
        run.op(40 + i % 2, gpu_ms=0.001, host_ms=0.002)  # 1 µs on the GPU, 2 µs on the host
    run.close()
    assert len(run.line.ops[0]) < COMPACT_AT
    gpu = run.section()["steps"][0]["gpu"]
    assert round(gpu["busy_ms"], 6) == n * 0.001
    assert round(gpu["idle_ms"]["launch"], 6) == n * 0.001


def test_the_per_step_figures_cover_the_same_later_steps_on_host_and_gpu():
    run = Run()
    run.op(8, gpu_ms=5, host_ms=1)
    run.close()  # step 0: 0..1, its GPU work runs to 5
    run.op(9, gpu_ms=1, host_ms=1)
    run.close()  # step 1: 1..2, pending too
    t = run.section()
    # no step after the first has its GPU half yet: the per-step figures are the run's
    assert "after_first" not in t and "first_step" not in t
    run.python(5)  # now 7: steps 0 and 1 are done
    run.op(10, gpu_ms=50, host_ms=1)
    run.close()  # step 2: 7..8, its GPU work runs to 57
    t = run.section()
    after = t["after_first"]
    # step 1 only, host and GPU alike (step 2, 2..8, is pending): 1..2, the GPU busy all along
    # with step 0's work
    assert after["steps"] == after["gpu"]["steps"] == 1
    assert after["wall_ms"] == after["gpu"]["wall_ms"] == 1.0 and after["gpu"]["busy_ms"] == 1.0
    assert t["first_step"]["gpu"]["busy_ms"] == 1.0  # step 0: 0..1, all busy
    run.python(60)
    run.close()
    assert run.section()["after_first"]["steps"] == 3


def test_step_0s_gpu_half_outlives_the_newest_steps_kept():
    run = Run()
    for _ in range(70):  # more than the 64 steps' figures kept
        run.op(8, gpu_ms=1, host_ms=2)
        run.close()
    t = run.section()
    assert 0 not in {s["step"] for s in t["steps"]}
    assert t["first_step"]["gpu"]["busy_ms"] == 1.0 and t["after_first"]["steps"] == 69
