"""Counts from many threads at once are exact, every run (issue: counts lost now and then).

On the fake GPU (tests/test_fake_cuda.py), so that backward really runs on autograd's device
thread while Python threads, short- and long-lived, daemon and not, copy and sync. Every total
and every line's count is asserted, in every repetition."""

from __future__ import annotations

import queue
import threading

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.profiler_helpers import line_at, line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),  # the exact counts hold on both counting paths
]

STEPS = 8
WORKERS = 6
WORKER_COPIES = 3


def _worker(n: int) -> None:
    for _ in range(n):
        t = torch.ones(4).to("cuda")  # @worker_copy
        t.sum().item()  # @worker_item


def _logger(q: queue.Queue) -> None:
    while (loss := q.get()) is not None:
        loss.item()  # @logger_item


def _workload() -> None:
    q: queue.Queue = queue.Queue()
    logger = threading.Thread(target=_logger, args=(q,), daemon=True)
    logger.start()
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    workers = []
    for step in range(STEPS):
        x = torch.randn(8, 16).to("cuda")  # @main_copy
        loss = model(x).square().mean()
        opt.zero_grad()
        if step < WORKERS:  # short-lived threads that start and end while backward runs
            w = threading.Thread(target=_worker, args=(WORKER_COPIES,), daemon=step % 2 == 0)
            w.start()
            workers.append(w)
        loss.backward()
        opt.step()
        q.put(loss.detach())
    q.put(None)
    for w in workers:
        w.join()
    logger.join()


def _check(r: profilers.Report) -> None:
    n = WORKERS * WORKER_COPIES
    assert line_at(r, line_of("worker_copy")).h2d.count == n
    assert line_at(r, line_of("worker_item")).syncs.by_cause == {"item": n}
    assert line_at(r, line_of("logger_item")).syncs.by_cause == {"item": STEPS}
    assert line_at(r, line_of("main_copy")).h2d.count == STEPS
    assert r.totals.syncs.by_cause == {"item": n + STEPS, "copy_to_device": n + STEPS + 4}
    assert r.totals.d2h.count == n + STEPS and r.totals.d2h.bytes == 4 * (n + STEPS)


@pytest.mark.slow
def test_threads_and_backward_at_once_count_exactly_every_time():
    from profilers.fake_cuda.harness import fake_cuda

    for _ in range(12):
        with fake_cuda(), profilers.profile(kernel_timing=False) as prof:
            _workload()
        _check(prof.report())


def test_a_state_handed_over_while_reports_are_read_keeps_every_count():
    """The interleaving the ownership rules must survive, forced with events: a thread ends and
    its state goes to the next new thread while the first thread's counts are being read, and a
    report is taken between every step."""
    from profilers.fake_cuda.harness import fake_cuda

    ended, taken_over = threading.Event(), threading.Event()

    def first() -> None:
        _worker(WORKER_COPIES)

    def second() -> None:
        ended.wait(5)
        _worker(WORKER_COPIES)  # on the state the first thread left
        taken_over.set()

    with fake_cuda(), profilers.profile(kernel_timing=False) as prof:
        a, b = threading.Thread(target=first), threading.Thread(target=second)
        b.start()
        a.start()
        a.join()
        mid = prof.report()  # read while b is about to take a's state over
        ended.set()
        taken_over.wait(5)
        during = prof.snapshot()
        b.join()
    final = prof.report()
    assert line_at(mid, line_of("worker_copy")).h2d.count == WORKER_COPIES
    assert during["totals"]["h2d"]["count"] == 2 * WORKER_COPIES
    assert line_at(final, line_of("worker_copy")).h2d.count == 2 * WORKER_COPIES
    assert line_at(final, line_of("worker_item")).syncs.by_cause == {"item": 2 * WORKER_COPIES}


def test_a_copy_made_while_another_thread_is_inside_a_fake_kernel_is_counted():
    """The race behind the lost counts, forced: FakeTensorMode marks itself "inside a kernel"
    around every fake op, and a fake tensor's device then reads ``meta``; with that mark shared
    by all threads, a copy classified meanwhile on another thread was not a copy."""
    from torch._subclasses.fake_tensor import in_kernel_invocation_manager

    from profilers.fake_cuda.harness import fake_cuda

    inside, leave = threading.Event(), threading.Event()
    with fake_cuda() as harness, profilers.profile(kernel_timing=False) as prof:

        def in_a_kernel() -> None:  # held open where FakeTensorMode holds it for an op
            with in_kernel_invocation_manager(harness.fake_mode):
                inside.set()
                leave.wait(5)

        other = threading.Thread(target=in_a_kernel)
        other.start()
        assert inside.wait(5)
        t = torch.ones(4).to("cuda")  # @during_kernel
        assert t.device == torch.device("cuda:0")
        leave.set()
        other.join()
    line = line_at(prof.report(), line_of("during_kernel"))
    assert line.h2d.count == 1 and line.syncs.by_cause == {"copy_to_device": 1}
