"""A script's own FakeTensorMode: counts that hold across threads, and copies whose size is
symbolic (a data-dependent shape under a ShapeEnv)."""

from __future__ import annotations

import queue
import threading

import pytest
import torch
from torch import nn

import profilers
from gpuwatch.analysis import analyze
from tests import conftest
from tests.profiler_helpers import copies, fake_mode, line_at, line_of

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),
]


def _train_with_a_logger_thread(steps: int) -> None:
    losses: queue.Queue[torch.Tensor | None] = queue.Queue()

    def logger() -> None:
        while (loss := losses.get()) is not None:
            loss.item()  # @logger_item

    t = threading.Thread(target=logger)
    t.start()
    try:
        w = torch.randn(16, 4).to("cuda:0")
        for _ in range(steps):
            x = torch.randn(8, 16).to("cuda:0")
            losses.put(nn.functional.relu(x @ w).square().mean())
            for _ in range(20):  # more of the step while the logger reads the loss
                x = torch.tanh(x * 1.01 + 0.5)
    finally:
        losses.put(None)
        t.join()


@pytest.mark.slow
def test_a_logger_threads_syncs_are_exact_every_run(monkeypatch):
    failed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: failed.append(a.exc_value))
    steps = 6
    for run in range(12):  # the race lost some of them in about 3 runs of 7
        with profilers.profile(kernel_timing=False) as prof, fake_mode():
            _train_with_a_logger_thread(steps)
        assert failed == [], run  # FakeTensorMode's shared flag failed the logger's .item()
        item = line_at(prof.report(), line_of("logger_item"))
        assert item.syncs.to_dict() == {"count": steps, "by_cause": {"item": steps}}, run
        assert item.d2h.counts() == copies(count=steps, bytes=steps * 4, pageable=steps), run


def test_a_copy_of_symbolic_size_is_counted_with_its_bytes_unknown():
    with profilers.profile(kernel_timing=False) as prof, fake_mode():
        x = torch.randn(8).to("cuda:0")
        picked = x.nonzero()  # a size only the data knows: a SymInt under the ShapeEnv
        picked.to("cpu")  # @symbolic
        x.to("cpu")  # @known
    r = prof.report()
    sym = line_at(r, line_of("symbolic"))
    assert sym.d2h.counts() == copies(count=1, bytes=0, pageable=1)
    assert sym.d2h.unknown_bytes == 1 and sym.syncs.by_cause == {"copy_to_host": 1}
    assert r.totals.d2h.to_dict()["unknown_bytes"] == 1
    assert r.totals.d2h.bytes == 8 * 4  # the known copy's
    assert not r.internal_errors
    back = profilers.Report.from_dict(r.to_dict())
    assert back.totals.d2h.unknown_bytes == 1
    assert "unknown_bytes" not in back.totals.h2d.to_dict()  # absent where none
    import io

    from rich.console import Console

    from gpuwatch.output.text import summary

    out = io.StringIO()
    Console(file=out, width=200).print(summary(r, analyze(r)))
    said = " ".join(out.getvalue().split())
    assert "d2h GPU→host 2 32 B +1 of unknown size" in said  # the summary says it too


def test_the_flag_is_given_back_when_the_profile_ends():
    from torch._subclasses.fake_tensor import FakeTensorMode

    before = FakeTensorMode.__dict__["in_kernel_invocation"]
    with profilers.profile(kernel_timing=False):
        assert isinstance(FakeTensorMode.__dict__["in_kernel_invocation"], property)
    assert FakeTensorMode.__dict__["in_kernel_invocation"] is before
