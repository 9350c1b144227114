"""Under ``--fake-cuda --gpu NAME`` the script's own time off the CPU is host time: a
``time.sleep`` between two ops is in the predicted step, while the time the profile's thread
waits for the process's other threads (the backward's simulated ops, the GIL) and a preemption
are not the script's."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

import profilers
from profilers.timing import off_cpu
from profilers.timing.off_cpu import OffCpu
from tests import conftest
from tests.profiler_helpers import line_of

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)
needs_thread_usage = pytest.mark.skipif(
    off_cpu._THREAD is None, reason="getrusage(RUSAGE_THREAD) is Linux's: nothing is counted"
)


@needs_thread_usage
def test_time_off_the_cpu_counts_only_when_the_thread_blocked_and_less_the_others_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clocks = {"wall": 0, "cpu": 0, "others": 0, "switches": 0}
    monkeypatch.setattr(off_cpu, "perf_counter_ns", lambda: clocks["wall"])
    monkeypatch.setattr(off_cpu, "thread_time_ns", lambda: clocks["cpu"])
    monkeypatch.setattr(off_cpu, "clock_gettime_ns", lambda clock: clocks["others"])
    monkeypatch.setattr(
        off_cpu.resource, "getrusage", lambda who: SimpleNamespace(ru_nvcsw=clocks["switches"])
    )

    def after(wall: int, cpu: int, others: int, switches: int) -> int:
        clocks["wall"] += wall
        clocks["cpu"] += cpu
        clocks["others"] += others
        clocks["switches"] += switches
        return off.since()

    off = OffCpu()
    off.others = {7: 0}  # one thread that is not the script's (a device thread, the sender)
    off.threads = threading.active_count()
    assert off.since() == 0  # the first reading: nothing before it
    # 1 ms on the CPU, then a 10 ms sleep: the thread blocked by itself
    assert after(wall=11_000_000, cpu=1_000_000, others=0, switches=1) == 10_000_000
    # 4 ms off the CPU without blocking: preempted by a neighbour, not the script's cost
    assert after(wall=6_000_000, cpu=2_000_000, others=0, switches=0) == 0
    # 9 ms blocked while the other thread ran 7 ms (the backward's simulated ops, the GIL
    # held by our sender): 2 ms are the script's
    assert after(wall=10_000_000, cpu=1_000_000, others=7_000_000, switches=3) == 2_000_000
    # it ran longer than the wait (on the second core): nothing, never below zero
    assert after(wall=3_000_000, cpu=1_000_000, others=5_000_000, switches=1) == 0


def test_the_threads_watched_are_autograds_device_threads_and_ours_not_the_scripts() -> None:
    from profilers import registry

    stop = threading.Event()
    mine = threading.Thread(target=stop.wait, name="the script's own")
    ours = registry.OwnThread(target=stop.wait, name="ours")
    mine.start()
    ours.start()
    try:
        off = OffCpu()
        off._watch()
        assert ours.ident is not None and mine.ident is not None
        assert time.pthread_getcpuclockid(ours.ident) in off.others
        assert time.pthread_getcpuclockid(mine.ident) not in off.others  # its GIL is a wait
        assert time.pthread_getcpuclockid(threading.get_ident()) not in off.others
    finally:
        stop.set()
        mine.join()
        ours.join()


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
@needs_thread_usage
def test_a_sleep_between_two_ops_is_in_the_predicted_step() -> None:
    from profilers.fake_cuda.harness import fake_cuda

    slept: list[int] = []
    with fake_cuda(1), profilers.profile(kernel_timing=False, count_ops=True, gpu="H100") as p:
        x = torch.randn(64, 64, device="cuda:0")
        for _ in range(5):
            y = x @ x
            t0 = time.perf_counter_ns()
            time.sleep(0.01)
            slept.append(time.perf_counter_ns() - t0)
            x = y / y.norm()  # @after
            profilers.step()
    log = p._log
    assert log is not None
    for step in log.steps:
        after = [o for o in step.ops() if o.line.endswith(f":{line_of('after')}")]
        assert after, "the line after the sleep queued GPU work"
        # the sleep is host time before the line's first op; the Python around it on a loaded
        # 2-core box stays under 5 ms (the tolerance), and the CPU time alone held about none
        host = after[0].host_ns - after[0].overhead_ns
        assert min(slept) <= host + 200_000 <= max(slept) + 5_000_000, (host, slept)
    r = p.report()
    assert r.time is not None
    run_gpu = r.time["run"]["gpu"]
    assert run_gpu["measured"] == "predicted"
    assert float(run_gpu["wall_ms"]) >= min(slept) / 1e6  # the step is at least its sleep
