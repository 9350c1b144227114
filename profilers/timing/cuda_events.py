"""Kernel time of ops on a GPU: two CUDA events around each op on the op's stream, read back
lazily with ``query()`` and never waited on until the profile ends. With a GPU timeline
(:mod:`profilers.timing.gpu_time`) each resolved op is also placed on the host's clock: the
timer's queue then carries its anchors and the steps' ends too, in the order they happened."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.cuda import Stream

from profilers.stats import Copies, OpCount
from profilers.timing.gpu_time import Anchor, StepMark
from profilers.timing.gpu_time import TimingEvent as Event
from profilers.timing.oplog import GPU_NS
from profilers.torch_private import cuda_current_stream, cuda_event_base

if TYPE_CHECKING:
    from profilers.counting.ops import Transfer  # noqa: TID251 (types only)
    from profilers.timing.gpu_time import GpuTimeline


class CudaApi(Protocol):
    """The CUDA calls the timer makes (tests pass a TorchCuda with stand-in parts)."""

    def stream_for(
        self, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[Stream, int] | None:
        """The stream an op with these arguments runs on, and its GPU's index; None for an op
        that runs on no GPU."""

    def new_event(self) -> Event:
        """A timing event with ``query()`` and ``elapsed_time(other)``."""

    record: Callable[[Event, Stream], None]
    """``record(event, stream)``."""

    def synchronize(self, device: int) -> None:
        """Waits for everything queued on GPU ``device`` (the profiler's one wait, at the end)."""


class TorchCuda:
    """The real calls. The current stream is looked up in C and its Stream object kept per
    (stream, device): ``torch.cuda.current_stream()`` builds a new one in Python on every call,
    several times the cost of recording the two events."""

    tensor_types: tuple[type, ...] = (torch.Tensor, torch.nn.Parameter)
    """Exact types of the tensors whose ops are timed: fake tensors and subclasses are not."""

    def __init__(self) -> None:
        self._current = cuda_current_stream
        self._streams: dict[tuple[int, int, int], Stream] = {}
        # NB: the C method under torch.cuda.Event.record, whose Python wrapper (a frame and a
        # super() call) would cost a third of each record.
        base = cuda_event_base
        self.record: Callable[[Event, Stream], None] = getattr(base, "record", _record)

    def stream_for(
        self, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[Stream, int] | None:
        a0: Any = args[0] if args else None
        if type(a0) in (list, tuple) and a0:
            a0 = a0[0]
        types = self.tensor_types
        if type(a0) in types and a0.is_cuda:
            device = a0.get_device()
        elif isinstance(a0, torch.Tensor) and type(a0) not in types:
            return None  # a fake tensor or a subclass: no kernel of its own to time
        else:
            a1: Any = args[1] if len(args) > 1 else None
            if type(a1) in types and a1.is_cuda:  # copy_(host_dst, gpu_src), host scalar + gpu
                device = a1.get_device()
            else:  # a copy to a GPU (.to/.cuda), a factory (zeros, randn) on a GPU
                target = kwargs.get("device")
                if type(target) is not torch.device or target.type != "cuda":
                    return None
                device = target.index if target.index is not None else self.current_device()
        if self._current is None:  # a torch without the C lookup
            return torch.cuda.current_stream(device), device
        key = self._current(device)  # (stream id, device index, device type)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = self.make_stream(key)
        return stream, device

    def make_stream(self, key: tuple[int, int, int]) -> Stream:
        return torch.cuda.Stream(  # type: ignore[no-untyped-call]  # torch leaves it untyped
            stream_id=key[0], device_index=key[1], device_type=key[2]
        )

    def current_device(self) -> int:
        return torch.cuda.current_device()

    def new_event(self) -> Event:
        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def synchronize(self, device: int) -> None:
        torch.cuda.synchronize(device)


def _record(event: Event, stream: Stream) -> None:
    event.record(stream)


@dataclass(slots=True, eq=False)
class TimedOp:
    """One op timed on a GPU: its two events, its GPU, the op's entry its time goes to, and the
    copies it made (set by the recorder when it counts one), credited too."""

    start: Event
    end: Event
    device: int
    entry: OpCount
    stream: Stream
    """The CUDA stream it ran on (the step replay's records tell streams apart by it)."""
    anchor_ns: int = 0
    """Set for a host read (profilers/timing/charge.py): the host time its sync returned,
    when its stream was empty; its end event is then an anchor (gpu_time.py)."""
    queued_ns: int = 0
    """When the host queued it (set by the hot path; 0: not known)."""
    line: object = None
    """The line it ran at (a ``LineStats``; set by the hot path, for the GPU timeline)."""
    found: Transfer | list[Transfer] | None = None
    """What it copied or synced (a ``Transfer``, a list of them, or None; set by the hot
    path): a copy the host is blocked in is copy time on the GPU timeline."""
    copies: Copies | None = None
    """The op's :class:`~profilers.stats.Copies`, when it copied (Recorder.apply)."""
    replay: list[Any] | None = None
    """The step replay's record of the op (profilers/timing/oplog.py): given its GPU ns."""


class CudaTimer:
    """Pairs of pooled events per op; each op's GPU milliseconds are added, once both events
    have completed, to its ``OpCount`` entry and to the copies it made, if any.

    Use per op: ``began = begin(args)``, run the op, ``timed = end(began, entry)``, optionally
    ``timed.copies = copies``, then ``queue(timed)``.
    """

    RESOLVE_EVERY = 512
    """Ops queued between two looks at which events have completed."""

    def __init__(self, api: CudaApi) -> None:
        self.api = api
        self._record = api.record
        self._pending: deque[TimedOp | Anchor | StepMark] = deque()
        self._free: list[Event] = []
        self._since_resolve = 0
        self._resolving = threading.Lock()
        self.events_made = 0
        self.timeline: GpuTimeline | None = None
        """The GPU timeline (:class:`profilers.timing.gpu_time.GpuTimeline`) resolved ops are
        placed on, or None (kernel time only)."""
        self.own_wait: Callable[[int], None] = api.synchronize
        """The profiler's own wait on a device (the session's setup keeps it from counting as
        the script's sync)."""
        self._anchored: set[int] = set()
        self.now: Callable[[], int] = time.perf_counter_ns
        """The host's clock (the step clock's): an anchor's host time (tests inject one)."""

    def begin(
        self, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[Stream, int, Event] | None:
        """Records the start event on the op's stream, or returns None when the op runs on no
        GPU (it is not timed)."""
        found = self.api.stream_for(args, kwargs)
        if found is None:
            return None
        stream, device = found
        if device not in self._anchored:  # once per device
            self._first_anchor(stream, device)
        start = self._event()
        self._record(start, stream)
        return stream, device, start

    def end(self, began: tuple[Stream, int, Event], entry: OpCount) -> TimedOp:
        stream, device, start = began
        end = self._event()
        self._record(end, stream)
        return TimedOp(start, end, device, entry, stream)

    def _first_anchor(self, stream: Stream, device: int) -> None:
        """The device's first anchor: synchronized once, so an event recorded now runs now."""
        self._anchored.add(device)
        if self.timeline is None:
            return
        self.own_wait(device)
        event = self._event()
        host_ns = self.now()
        self._record(event, stream)
        self._pending.append(Anchor(device, event, host_ns))

    def mark(self, mark: StepMark) -> None:
        """Queues ``mark`` (a closed step, :class:`~profilers.timing.gpu_time.StepMark`): the
        timeline is told once every op queued before it is resolved."""
        self._pending.append(mark)

    def queue(self, record: TimedOp) -> None:
        self._pending.append(record)
        self._since_resolve += 1
        if self._since_resolve >= self.RESOLVE_EVERY:
            self.resolve()

    def _event(self) -> Event:
        if self._free:
            return self._free.pop()
        self.events_made += 1
        return self.api.new_event()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def resolve(self, wait: bool = False) -> None:
        """Credits the ops whose events have completed, oldest first; waits for the GPUs first
        only when ``wait`` (the end of the profile). A resolve already under way on another
        thread is not waited for."""
        if not self._pending or not self._resolving.acquire(blocking=wait):
            return
        try:
            self._since_resolve = 0
            pending = self._pending
            if wait:
                for device in sorted({p.device for p in pending if not isinstance(p, StepMark)}):
                    self.api.synchronize(device)
            line = self.timeline
            while pending:
                timed = pending[0]
                if not isinstance(timed, TimedOp):  # an anchor, or a step's end (gpu_time.py)
                    if not wait and not timed.ready():
                        break
                    pending.popleft()
                    assert line is not None  # NB: anchors and marks come with a timeline
                    if isinstance(timed, StepMark):
                        line.reached(timed)
                    else:
                        free = line.anchor(timed)
                        if free is not None:
                            self._free.append(free)
                    continue
                if not wait and not timed.end.query():
                    break
                pending.popleft()
                ms = timed.start.elapsed_time(timed.end)
                timed.entry.ms += ms
                if timed.copies is not None:
                    timed.copies.time_ms += ms
                if line is None:
                    self._free += (timed.start, timed.end)
                else:
                    self._free.append(timed.start)
                    free = line.place(timed, ms)
                    if free is not None:
                        self._free.append(free)
                if timed.replay is not None:  # a step replay's record (timing/oplog.py)
                    timed.replay[GPU_NS] = round(ms * 1e6)
        finally:
            self._resolving.release()
