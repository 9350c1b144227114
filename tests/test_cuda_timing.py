"""Kernel timing with CUDA events, on the CPU: the real TorchCuda with stand-in events and
streams, and fake CUDA tensors. What a GPU adds (real events) is in test_gpu_profiler.py."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

import profilers
from profilers.timing.cuda_events import CudaTimer, TorchCuda
from tests.profiler_helpers import fake_mode, line_at, line_of, never_pinned

TICK_MS = 0.25
"""The stand-in GPU's clock moves this much at every event record: each timed op takes it."""


class StubStream:
    def __init__(self, key: tuple[int, int, int]) -> None:
        self.key = key


class StubEvent:
    def __init__(self, gpu: StubCuda) -> None:
        self.gpu = gpu
        self.at_ms: float | None = None
        self.stream: StubStream | None = None

    def record(self, stream: StubStream) -> None:
        self.gpu.clock_ms += TICK_MS
        self.at_ms = self.gpu.clock_ms
        self.stream = stream
        self.index = len(self.gpu.recorded)
        self.gpu.recorded.append(self)

    def query(self) -> bool:
        self.gpu.queries += 1
        return self.gpu.done or self.index < self.gpu.done_upto

    def elapsed_time(self, end: StubEvent) -> float:
        assert self.at_ms is not None and end.at_ms is not None
        return end.at_ms - self.at_ms


class StubCuda(TorchCuda):
    """The real stream/device logic over stand-in streams, events and synchronize; fake CUDA
    tensors count as GPU tensors."""

    tensor_types = (torch.Tensor, torch.nn.Parameter, FakeTensor)

    def __init__(self) -> None:
        super().__init__()
        self.current = {0: 0, 1: 0}
        """The current stream id per device (what torch.cuda.stream(s) would change)."""
        self._current = lambda index: (self.current[index], index, 1)
        self.record = lambda event, stream: event.record(stream)
        self.clock_ms = 0.0
        self.done = False
        """Whether every recorded event has completed."""
        self.done_upto = 0
        """Events recorded before this many have completed (a synchronize waited for them)."""
        self.recorded: list[StubEvent] = []
        self.streams_made: list[tuple[int, int, int]] = []
        self.synchronized: list[int] = []
        self.queries = 0

    def make_stream(self, key: tuple[int, int, int]) -> StubStream:
        self.streams_made.append(key)
        return StubStream(key)

    def current_device(self) -> int:
        return 1

    def new_event(self) -> StubEvent:
        return StubEvent(self)

    def synchronize(self, device: int) -> None:
        self.synchronized.append(device)
        self.done_upto = len(self.recorded)


def test_gpu_ops_and_copies_get_their_event_time_once_the_gpu_is_there():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned) as prof, fake_mode():
        host = torch.randn(64, 64)  # @host
        x = host.to("cuda:0")  # @h2d
        y = x * 2  # @mul
        back = torch.empty(64, 64)
        back.copy_(y)  # @d2h
        running = prof.snapshot()
        gpu.done = True
        done = prof.snapshot()
    assert running["totals"]["kernel_time_ms"] == 0  # nothing waited for while running
    # but the device once, at its first op: the anchor of the GPU timeline (gpu_time.py)
    assert gpu.synchronized == [0]
    r = prof.report()
    assert r.options.kernel_timing_source == "cuda_events"
    # randn and empty on the host: counted, not timed.
    assert line_at(r, line_of("host")).ops == 1 and line_at(r, line_of("host")).kernel_time_ms == 0
    h2d = line_at(r, line_of("h2d"))
    assert h2d.kernel_time_ms == TICK_MS and h2d.h2d.time_ms == TICK_MS and h2d.h2d.count == 1
    assert line_at(r, line_of("mul")).kernel_time_ms == TICK_MS
    d2h = line_at(r, line_of("d2h"))
    assert d2h.d2h.count == 1 and d2h.d2h.time_ms == TICK_MS
    assert r.totals.kernel_time_ms == 3 * TICK_MS == done["totals"]["kernel_time_ms"]
    # The device's anchor, then per timed op a start event and an end event, on its stream.
    assert [e.stream.key for e in gpu.recorded] == [(0, 0, 1)] * 7
    assert gpu.streams_made == [(0, 0, 1)]  # one Stream object, kept


def test_the_copy_and_factory_device_decide_the_stream_and_the_current_device_fills_in():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned), fake_mode():
        torch.zeros(4, device="cuda:1")
        torch.ones(4).to("cuda:1")
        gpu.current[0] = 7  # as under torch.cuda.stream(s) on cuda:0
        torch.ones(4, device="cuda:0") + 1
    # cuda:1's anchor, two ops' pairs, cuda:0's anchor, two ops' pairs
    keys = [e.stream.key for i, e in enumerate(gpu.recorded) if i in (0, 1, 3, 5, 6, 8)]
    assert keys == [(0, 1, 1), (0, 1, 1), (0, 1, 1), (7, 0, 1), (7, 0, 1), (7, 0, 1)]
    assert len(gpu.recorded) == 2 + 4 * 2
    assert gpu.streams_made == [(0, 1, 1), (7, 0, 1)]
    # A device with no index is the current one (1 here).
    stream, device = gpu.stream_for((torch.ones(4),), {"device": torch.device("cuda")})
    assert device == 1 and stream.key == (0, 1, 1)


def test_pending_ops_are_waited_for_once_per_gpu_at_the_end_only():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned) as prof, fake_mode():
        a = torch.ones(8, device="cuda:0")
        b = torch.ones(8, device="cuda:1")
        for _ in range(3 * CudaTimer.RESOLVE_EVERY):
            a = a + 1
        b = b * 2
    # the profiler's waits, per GPU: once at its first op (its anchor), once after the loop
    assert gpu.synchronized == [0, 1, 0, 1]
    assert gpu.queries >= 2  # it looked (every RESOLVE_EVERY ops) without waiting
    r = prof.report()
    ops = 2 + 3 * CudaTimer.RESOLVE_EVERY + 1
    assert r.totals.ops == ops and r.totals.kernel_time_ms == ops * TICK_MS
    assert r.totals.syncs.count == 0  # the profiler's own wait is not the user's sync


@pytest.mark.slow
def test_events_are_reused_once_read():
    gpu = StubCuda()
    gpu.done = True
    with profilers.profile(cuda=gpu, is_pinned=never_pinned) as prof, fake_mode():
        a = torch.ones(8, device="cuda:0")
        for _ in range(5 * CudaTimer.RESOLVE_EVERY):
            a = a + 1
    timer = prof._recorder.timer  # type: ignore[union-attr]
    assert timer is not None and timer.pending == 0
    assert timer.events_made <= 2 * CudaTimer.RESOLVE_EVERY + 3
    assert len(gpu.recorded) == 2 * (5 * CudaTimer.RESOLVE_EVERY + 1) + 1  # + the anchor
    assert prof.report().totals.kernel_time_ms == (5 * CudaTimer.RESOLVE_EVERY + 1) * TICK_MS


def test_real_cuda_api_leaves_fake_and_host_ops_untimed():
    cuda = TorchCuda()
    with fake_mode():
        fake = torch.ones(4, device="cuda:0")
    host = torch.ones(4)
    assert cuda.stream_for((fake,), {}) is None
    assert cuda.stream_for((host,), {}) is None
    assert cuda.stream_for((host, 2), {}) is None
    assert cuda.stream_for(([4, 4],), {"device": torch.device("cpu")}) is None
    assert cuda.stream_for((), {}) is None


def test_without_kernel_timing_no_event_is_recorded():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, kernel_timing=False, is_pinned=never_pinned) as prof:
        with fake_mode():
            torch.ones(4, device="cuda:0") + 1
    assert gpu.recorded == [] and prof.report().options.kernel_timing_source == "off"
