"""The recorder: charges each op's copies, syncs and time to a site. Hot path; keep it lean."""

from __future__ import annotations

import linecache
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from profilers._ops import OTHER, SYNCHRONIZE, IsPinned, Transfer, classify, default_is_pinned
from profilers._sites import UNKNOWN, UserCode
from profilers._stats import Counters, SiteStats

_REAL_TENSORS = (torch.Tensor, torch.nn.Parameter)


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.table: dict[tuple[str, int], SiteStats] | None = None
        self.op: Any = None
        """The op running on this thread now (for sync callbacks that fire inside it)."""
        self.synced = False
        self.in_comm = 0


class Recorder:
    """Aggregates per site, in one table per thread (merged on demand), so threads never contend.

    Args:
        user: decides which frames are user code.
        kernel_timing: time ops (CUDA events on GPUs, host time on the CPU).
        timeline_capacity: the newest copy/sync events kept for the report's timeline.
        is_pinned: tells whether a host tensor is pinned (tests inject one for fake tensors).
        clock: seconds, for host op time and the timeline.
    """

    def __init__(
        self,
        user: UserCode,
        kernel_timing: bool = True,
        timeline_capacity: int = 10_000,
        is_pinned: IsPinned | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.user = user
        self.kernel_timing = kernel_timing
        self.cuda_timing = kernel_timing and torch.cuda.is_available()
        self.is_pinned = is_pinned or default_is_pinned
        self.clock = clock
        self.t0 = clock()
        self.active = True
        self.own_sync = False
        """True while the profiler itself waits on the GPU (its one final synchronize)."""
        self.backward_site: SiteStats | None = None
        """The user line of the .backward()/autograd.grad call under way, for autograd threads."""
        self.timeline: deque[tuple[float, str | None, int, str | None, str]] = deque(
            maxlen=max(0, timeline_capacity)
        )
        self.timeline_capacity = timeline_capacity
        self.events_recorded = 0
        self.devices: set[str] = set()
        self._tls = _ThreadState()
        self._tables: list[dict[tuple[str, int], SiteStats]] = []
        self._lock = threading.Lock()
        self._pending: deque[tuple[SiteStats, str, int, Any, Any]] = deque()
        self._free_events: list[Any] = []
        self._since_resolve = 0
        self._resolving = threading.Lock()
        self._names: dict[Any, str] = {}

    # -- sites --------------------------------------------------------------------------------

    def _table(self) -> dict[tuple[str, int], SiteStats]:
        table = self._tls.table
        if table is None:
            table = self._tls.table = {}
            with self._lock:
                self._tables.append(table)
        return table

    def site_for(self, frame: FrameType | None) -> SiteStats:
        """The site of the innermost user frame, else the running backward call, else unknown."""
        table = self._tls.table
        if table is None:
            table = self._table()
        f = self.user.first(frame)
        if f is None:
            return self._borrowed_site(table)
        code = f.f_code
        key = (code.co_filename, f.f_lineno)
        site = table.get(key)
        if site is None:
            site = SiteStats(self.user.display(code.co_filename), f.f_lineno, code.co_name,
                             self.user.chain(f))
            site.source = linecache.getline(code.co_filename, f.f_lineno).strip()
            table[key] = site
        return site

    def _borrowed_site(self, table: dict[tuple[str, int], SiteStats]) -> SiteStats:
        # NB: autograd's device threads run backward ops with no Python frame of the user's on
        # their stack; they belong to the .backward() call the user is blocked in.
        origin = self.backward_site
        key = origin.key if origin is not None else UNKNOWN
        site = table.get(key)
        if site is None:
            if origin is None:
                site = SiteStats(UNKNOWN[0], UNKNOWN[1], "<no user frame>")
            else:
                site = SiteStats(origin.file, origin.line, origin.function, origin.stack)
                site.source = origin.source
            table[key] = site
        return site

    # -- the hot path -------------------------------------------------------------------------

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], frame: FrameType | None) -> Any:
        site = self.site_for(frame)
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = str(func).removeprefix("aten.")
        tls = self._tls
        tls.op = func
        tls.synced = False
        ms = 0.0
        a0 = args[0] if args else None
        if type(a0) in (list, tuple) and a0:
            a0 = a0[0]
        if self.cuda_timing and type(a0) in _REAL_TENSORS and a0.is_cuda:
            stream = torch.cuda.current_stream(a0.device)
            start = self._event()
            start.record(stream)
            try:
                out = func(*args, **kwargs)
            finally:
                tls.op = None
            end = self._event()
            end.record(stream)
            self._pending.append((site, name, a0.device.index or 0, start, end))
            self._since_resolve += 1
            if self._since_resolve >= 512:
                self.resolve()
        elif self.kernel_timing:
            t = self.clock()
            try:
                out = func(*args, **kwargs)
            finally:
                tls.op = None
            ms = (self.clock() - t) * 1000.0
        else:
            try:
                out = func(*args, **kwargs)
            finally:
                tls.op = None
        site.ops += 1
        site.kernel_time_ms += ms
        entry = site.op_breakdown.get(name)
        if entry is None:
            entry = site.op_breakdown[name] = [0, 0.0]
        entry[0] += 1
        entry[1] += ms
        if not tls.in_comm:
            transfer = classify(func, args, kwargs, out, self.is_pinned)
            if transfer is not None:
                self.apply(site, transfer)
            elif tls.synced:
                # The GPU trace saw this op make the host wait, and no rule above explains it.
                self.apply(site, Transfer(None, sync=OTHER))
        return out

    def apply(self, site: SiteStats, t: Transfer) -> None:
        if t.direction is not None:
            site.copies(t.direction).add(t.nbytes, t.pageable, t.non_blocking)
            if t.src is not None:
                self.devices.add(t.src)
            if t.dst is not None:
                self.devices.add(t.dst)
        if t.sync is not None:
            site.syncs.add(t.sync)
        self.events_recorded += 1
        self.timeline.append((self.clock() - self.t0, t.direction, t.nbytes, t.sync,
                              f"{site.file}:{site.line}"))

    # -- syncs the dispatcher never sees --------------------------------------------------------

    def on_trace_sync(self, kind: str, frame: FrameType | None) -> None:
        """A GPU trace callback: ``kind`` is ``device``, ``stream`` or ``event``."""
        if not self.active or self.own_sync:
            return
        tls = self._tls
        if tls.op is not None:
            tls.synced = True  # inside an op: charged with that op
            return
        if tls.in_comm:
            return
        cause = SYNCHRONIZE
        if kind == "stream" and _inside_tensor_printing(frame):
            # NB: printing a CUDA tensor copies it to the host with every mode disabled
            # (torch/_tensor_str.py), so only this stream synchronisation shows it.
            from profilers._ops import COPY_TO_HOST

            cause = COPY_TO_HOST
        self.apply(self.site_for(frame), Transfer(None, sync=cause))

    # -- CUDA event timing ----------------------------------------------------------------------

    def _event(self) -> Any:
        if self._free_events:
            return self._free_events.pop()
        return torch.cuda.Event(enable_timing=True)

    def resolve(self, wait: bool = False) -> None:
        """Adds the GPU time of ops whose end event has completed; never waits unless ``wait``."""
        if not self._pending or not self._resolving.acquire(blocking=wait):
            return
        try:
            self._since_resolve = 0
            if wait:
                self.own_sync = True
                try:
                    for dev in {p[2] for p in self._pending}:
                        torch.cuda.synchronize(dev)
                finally:
                    self.own_sync = False
            pending = self._pending
            while pending:
                site, name, _dev, start, end = pending[0]
                if not wait and not end.query():
                    break
                pending.popleft()
                ms = start.elapsed_time(end)
                site.kernel_time_ms += ms
                entry = site.op_breakdown.get(name)
                if entry is not None:
                    entry[1] += ms
                self._free_events.extend((start, end))
        finally:
            self._resolving.release()

    # -- reading --------------------------------------------------------------------------------

    def merged_sites(self) -> list[SiteStats]:
        """All threads' sites merged by (file, line), a fresh copy safe to read."""
        with self._lock:
            tables = list(self._tables)
        merged: dict[tuple[str, int], SiteStats] = {}
        for table in tables:
            for site in list(table.values()):
                key = site.key
                into = merged.get(key)
                if into is None:
                    into = merged[key] = SiteStats(site.file, site.line, site.function, site.stack)
                    into.source = site.source
                into.merge(site)
        return list(merged.values())


def totals_of(sites: list[SiteStats]) -> Counters:
    total = Counters()
    for s in sites:
        total.merge(s)
    return total


def _inside_tensor_printing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(("_tensor_str.py",)):
            return True
        frame = frame.f_back
    return False
