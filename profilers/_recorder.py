"""The recorder: charges each op's copies, syncs and time to a site. Hot path; keep it lean."""

from __future__ import annotations

import linecache
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from sys import _getframe
from time import perf_counter as _perf_counter
from types import FrameType
from typing import Any

import torch

from profilers._cuda_timing import CudaApi, CudaTimer, TorchCuda
from profilers._ops import (
    CLASSIFIERS,
    METADATA_OPS,
    OTHER,
    SYNCHRONIZE,
    Classifier,
    IsPinned,
    Transfer,
    default_is_pinned,
)
from profilers._sites import UNKNOWN, UserCode
from profilers._stats import Counters, SiteStats

_eval_frame: Any
try:
    from torch._C._dynamo import eval_frame as _eval_frame
except ImportError:  # a torch without dynamo: nothing to hide from
    _eval_frame = None


def _no_eval_frame(callback: Any) -> Any:
    return None


_set_eval_frame: Callable[[Any], Any] = getattr(_eval_frame, "set_eval_frame", _no_eval_frame)


def hide_from_dynamo() -> bool:
    """Marks dispatch() for dynamo to skip; False where this torch cannot (see _mode.py), and
    then torch's own wrapper around __torch_dispatch__ stays."""
    mark = getattr(_eval_frame, "set_code_exec_strategy", None)
    if mark is None or _set_eval_frame is _no_eval_frame:
        return False
    skip = _eval_frame._FrameExecStrategy(
        _eval_frame._FrameAction.SKIP, _eval_frame._FrameAction.DEFAULT
    )
    mark(dispatch.__code__, skip)
    mark(_under_compile.__code__, skip)
    return True


class _ThreadState:
    """What one thread's ops need, in slots (a threading.local read per op, then plain loads)."""

    __slots__ = (
        "in_comm",
        "last_frame",
        "last_lasti",
        "last_site",
        "last_user",
        "op",
        "synced",
        "table",
    )

    def __init__(self) -> None:
        self.table: dict[tuple[str, int], SiteStats] = {}
        self.op: Any = None
        """The op running on this thread now (for sync callbacks that fire inside it)."""
        self.synced = False
        self.in_comm = 0
        # NB: the site of the last op's calling frame. Holding the frame keeps it (and so its
        # locals) alive until the next op or the end of the profile; in exchange, ops called
        # from the same frame and line skip the walk up the stack.
        self.last_frame: FrameType | None = None
        self.last_user: FrameType | None = None
        self.last_lasti = -1
        self.last_site: SiteStats | None = None

    def forget_frames(self) -> None:
        self.last_frame = self.last_user = self.last_site = None


_UNSEEN: Any = object()


def _op_info(func: Any) -> tuple[str, Classifier | None] | None:
    """Per-op facts, computed once per overload: None for metadata ops (skipped), else the op's
    short name and its classifier (one dict lookup per op instead of three hashed ones)."""
    if func in METADATA_OPS:
        return None
    return str(func).removeprefix("aten."), CLASSIFIERS.get(func)


class Recorder:
    """Aggregates per site, in one table per thread (merged on demand), so threads never contend.

    Args:
        user: decides which frames are user code.
        kernel_timing: time ops (CUDA events on GPUs, host time on the CPU).
        timeline_capacity: the newest copy/sync events kept for the report's timeline.
        is_pinned: tells whether a host tensor is pinned (tests inject one for fake tensors).
        clock: seconds, for the timeline (op times use time.perf_counter).
    """

    def __init__(
        self,
        user: UserCode,
        kernel_timing: bool = True,
        timeline_capacity: int = 10_000,
        is_pinned: IsPinned | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cuda: CudaApi | None = None,
    ) -> None:
        self.user = user
        self.kernel_timing = kernel_timing
        self.timer: CudaTimer | None = None
        """Times ops with CUDA events when there is a GPU (``cuda``: stand-ins for tests)."""
        if kernel_timing and (cuda is not None or torch.cuda.is_available()):
            self.timer = CudaTimer(cuda if cuda is not None else TorchCuda())
        self.cuda_timing = self.timer is not None
        self.host_timing = kernel_timing and self.timer is None
        self.is_pinned = is_pinned or default_is_pinned
        self.clock = clock
        self.t0 = clock()
        self.caller_depth: int | None = None
        """Frames from ``__torch_dispatch__`` up to the op's caller (torch's shims included)."""
        self.active = True
        self.own_sync = False
        """True while the profiler itself waits on the GPU (its one final synchronize)."""
        self.trace_syncs = False
        """Syncs come from PyTorch's GPU trace callbacks (opt-in) rather than the entry points."""
        self.backward_site: SiteStats | None = None
        """The user line of the .backward()/autograd.grad call under way, for autograd threads."""
        self.timeline: deque[tuple[float, str | None, int, str | None, str]] = deque(
            maxlen=max(0, timeline_capacity)
        )
        self.timeline_capacity = timeline_capacity
        self.events_recorded = 0
        self.devices: set[str] = set()
        self._tls = threading.local()
        self._states: list[_ThreadState] = []
        self._lock = threading.Lock()
        self._info: dict[str, tuple[str, Classifier | None] | None] = {}

    # -- sites --------------------------------------------------------------------------------

    def state(self) -> _ThreadState:
        """This thread's state, made on its first op."""
        st: _ThreadState | None = getattr(self._tls, "s", None)
        if st is None:
            st = self._tls.s = _ThreadState()
            with self._lock:
                self._states.append(st)
        return st

    def site_for(self, frame: FrameType | None) -> SiteStats:
        """The site of the innermost user frame, else the running backward call, else unknown."""
        return self._site(self.state(), frame)

    def _site(self, st: _ThreadState, frame: FrameType | None) -> SiteStats:
        table = st.table
        f = self.user.first(frame)
        if f is None:
            return self._borrowed_site(table)
        if f is st.last_user and f.f_lasti == st.last_lasti:
            # A new library frame under the same user call (the next module of model(x)).
            site = st.last_site
            assert site is not None
            st.last_frame = frame
            return site
        code = f.f_code
        line = f.f_lineno
        key = (code.co_filename, line)
        site = table.get(key)
        if site is None:
            site = SiteStats(
                self.user.display(code.co_filename), line, code.co_name, self.user.chain(f)
            )
            site.source = linecache.getline(code.co_filename, line).strip()
            table[key] = site
        st.last_frame, st.last_user, st.last_lasti, st.last_site = frame, f, f.f_lasti, site
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

    def account(
        self,
        site: SiteStats,
        classifier: Classifier | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        ms: float,
        timed: list[Any] | None,
        synced: bool,
    ) -> None:
        """An op that may copy or sync: what its rule finds, else ``other`` when the GPU trace
        saw it make the host wait (``synced``) and no rule explains why."""
        if classifier is not None:
            transfer = classifier(args, kwargs, out, self.is_pinned)
            if transfer is not None:
                self.apply(site, transfer, ms, timed)
                return
        if synced:
            self.apply(site, Transfer(None, sync=OTHER))

    def apply(
        self, site: SiteStats, t: Transfer, ms: float = 0.0, timed: list[Any] | None = None
    ) -> None:
        """Counts ``t`` at ``site``; ``ms`` is the op's host time, or ``timed`` its CUDA timing
        record (credited when the events complete)."""
        if t.direction is not None:
            copies = site.copies(t.direction)
            copies.add(t.nbytes, t.pageable, t.non_blocking)
            copies.time_ms += ms
            if timed is not None:
                timed[4] = copies
            if t.dtype is not None:
                site.copy_dtypes[t.dtype] = site.copy_dtypes.get(t.dtype, 0) + t.nbytes
            if t.src is not None:
                self.devices.add(t.src)
            if t.dst is not None:
                self.devices.add(t.dst)
        if t.sync is not None:
            site.syncs.add(t.sync)
        self.events_recorded += 1
        self.timeline.append(
            (self.clock() - self.t0, t.direction, t.nbytes, t.sync, f"{site.file}:{site.line}")
        )

    # -- syncs the dispatcher never sees --------------------------------------------------------

    def on_trace_sync(self, kind: str, frame: FrameType | None) -> None:
        """A GPU trace callback: ``kind`` is ``device``, ``stream`` or ``event``."""
        if not self.active or self.own_sync or not self.trace_syncs:
            return
        st = self.state()
        if st.op is not None:
            st.synced = True  # inside an op: charged with that op
            return
        if st.in_comm:
            return
        cause = SYNCHRONIZE
        if kind == "stream" and _inside_tensor_printing(frame):
            # NB: printing a CUDA tensor copies it to the host with every mode disabled
            # (torch/_tensor_str.py), so only this stream synchronisation shows it.
            from profilers._ops import COPY_TO_HOST

            cause = COPY_TO_HOST
        self.apply(self.site_for(frame), Transfer(None, sync=cause))

    # -- CUDA event timing ----------------------------------------------------------------------

    def resolve(self, wait: bool = False) -> None:
        """Adds the GPU time of ops whose events have completed; waits only when ``wait``."""
        timer = self.timer
        if timer is None:
            return
        if not wait:
            timer.resolve()
            return
        self.own_sync = True
        try:
            timer.resolve(wait=True)
        finally:
            self.own_sync = False

    # -- reading --------------------------------------------------------------------------------

    def merged_sites(self) -> list[SiteStats]:
        """All threads' sites merged by (file, line), a fresh copy safe to read."""
        with self._lock:
            tables = [st.table for st in self._states]
        merged: dict[tuple[str, int], SiteStats] = {}
        for table in tables:
            for site in list(table.values()):
                key = site.key
                into = merged.get(key)
                if into is None:
                    into = merged[key] = SiteStats(site.file, site.line, site.function, site.stack)
                    into.source = site.source
                site.settle()
                into.merge(site)
        return list(merged.values())

    def forget_frames(self) -> None:
        """Drop the frames kept for the site cache (called when the profile ends)."""
        with self._lock:
            for st in self._states:
                st.forget_frames()


def totals_of(sites: list[SiteStats]) -> Counters:
    total = Counters()
    for s in sites:
        total.merge(s)
    return total


_SHIM_FILES = (
    os.path.join("torch", "_compile.py"),
    os.path.join("torch", "_dynamo", "eval_frame.py"),
)


def _current_caller(recorder: Recorder, base: int) -> FrameType | None:
    """The Python frame that called the op: ``base`` frames up from the caller of this
    function, past torch's shims, or None on a thread with no Python frames."""
    depth = recorder.caller_depth
    if depth is None:
        # NB: torch wraps every mode's __torch_dispatch__ in a dynamo-disabling shim
        # (TorchDispatchMode.__init_subclass__), a fixed number of frames that are new on every
        # op; count them once, then jump straight past them (one frame object made per op).
        try:
            frame: FrameType | None = sys._getframe(base + 1)
        except ValueError:
            return None
        depth = base
        while frame is not None and frame.f_code.co_filename.endswith(_SHIM_FILES):
            frame = frame.f_back
            depth += 1
        recorder.caller_depth = depth
        return frame
    try:
        return sys._getframe(depth + 1)
    except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
        return None


def dispatch(
    mode: Any,
    func: Any,
    types: Any,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
) -> Any:
    """``ProfilerMode.__torch_dispatch__``: the hot path, in one Python function (no calls of
    its own on the common path: each one costs about as much as a dict lookup)."""
    prior = _set_eval_frame(None)
    if prior is not None:
        # Under torch.compile: dynamo's frame callback was set. It stays cleared while the op
        # runs (what torch's own wrapper does), so dynamo never traces the profiler.
        return _under_compile(prior, mode, func, types, args, kwargs)
    recorder: Recorder = mode.recorder
    if kwargs is None:
        kwargs = {}
    # NB: keyed by the op's qualified name ("aten::add.Tensor"): OpOverload hashes in Python.
    info = recorder._info.get(func._name, _UNSEEN)
    if info is _UNSEEN:
        info = recorder._info[func._name] = _op_info(func)
    if info is None or not recorder.active:  # metadata ops skip everything, the frame too
        return func(*args, **kwargs)
    depth = recorder.caller_depth
    if depth is None:
        frame = _current_caller(recorder, 1)
    else:
        try:
            frame = _getframe(depth)
        except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
            frame = None
    name, classifier = info
    try:
        st: _ThreadState = recorder._tls.s
    except AttributeError:
        st = recorder.state()
    # Site cache: the same calling frame means the same user frame above it; only when the
    # caller is the user frame itself can the line have moved (f_lasti says whether it did).
    if (
        frame is not None
        and frame is st.last_frame
        and (frame is not st.last_user or frame.f_lasti == st.last_lasti)
    ):
        site = st.last_site
        assert site is not None
    else:
        site = recorder._site(st, frame)
    # NB: only the per-op entry is counted here; the site's ops and kernel time are summed from
    # the entries when read (merged_sites), two attribute updates fewer per op.
    entry = site.op_breakdown.get(name)
    if entry is None:
        entry = site.op_breakdown[name] = [0, 0.0]
    entry[0] += 1
    ms = 0.0
    timed = None
    traced = recorder.trace_syncs
    if traced:  # a sync the GPU trace reports while the op runs is the op's (on_trace_sync)
        st.op = func
        st.synced = False
    try:
        timer = recorder.timer
        if timer is not None:
            began = timer.begin(args, kwargs)
            out = func(*args, **kwargs)
            if began is not None:
                timed = timer.end(began, entry)  # credited to entry[1] once the GPU is there
        elif recorder.host_timing:
            t = _perf_counter()
            out = func(*args, **kwargs)
            ms = (_perf_counter() - t) * 1000.0
            entry[1] += ms
        else:
            out = func(*args, **kwargs)
    finally:
        if traced:
            st.op = None
    if (classifier is not None or st.synced) and not st.in_comm:
        recorder.account(site, classifier, args, kwargs, out, ms, timed, st.synced)
    if timed is not None:
        timer.queue(timed)  # type: ignore[union-attr]
    return out


def _under_compile(
    prior: Any,
    mode: Any,
    func: Any,
    types: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
) -> Any:
    """dispatch() with dynamo's callback ``prior`` cleared, restored after. The op's caller is
    then two frames further up; the site lookup walks past these frames (profilers' own)."""
    try:
        return dispatch(mode, func, types, args, kwargs)
    finally:
        _set_eval_frame(prior)


def _inside_tensor_printing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(("_tensor_str.py",)):
            return True
        frame = frame.f_back
    return False
