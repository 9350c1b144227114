"""The recorder: charges each op's copies, syncs and time to a site. Hot path; keep it lean."""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from sys import _getframe
from time import perf_counter as _perf_counter
from types import FrameType
from typing import Any

import torch
from torch._ops import OpOverload

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

# NB: autograd makes an op's backward node (numbered from a per-thread counter) before the op
# reaches a dispatch mode, and during backward names the node running; both are C calls.
_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)


def _no_node() -> Any:
    return None


_current_node: Callable[[], Any] = getattr(torch._C, "_current_autograd_node", _no_node)
if _sequence_nr is None:
    _current_node = _no_node
_STEMS: dict[type, str] = {}
"""Node type -> _node_stem of its name, for types named like their nodes (one type per kind)."""
_grad_enabled = torch.is_grad_enabled

FORWARD_ENTRIES = 50_000
"""Site changes per thread remembered for charging backward ops to forward lines (the oldest
half is dropped past twice this): a graph older than that is charged to .backward() alone."""

_NO_FORWARD_OP = 1 << 63
"""Nodes numbered from here (AccumulateGrad: UINT64_MAX) were made by no forward op."""

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")


def _node_stem(name: str) -> str:
    """``"NativeLayerNormBackward0"`` -> ``"nativelayernorm"``."""
    return _BACKWARD_SUFFIX.sub("", name.rsplit("::", 1)[-1]).replace("_", "").lower()


def _stem_of(node: Any) -> str:
    name = node.name()
    stem = _node_stem(name)
    kind = type(node)
    if kind.__name__ == name.rsplit("::", 1)[-1]:
        _STEMS[kind] = stem
    return stem


def _made_by(op: str, stem: str) -> bool:
    """Whether an op (``"native_layer_norm.default"``) can have made a node of that stem; a
    prefix, for names like ``nll_loss_forward`` whose node is ``NllLossBackward0``."""
    return bool(stem) and op.split(".", 1)[0].replace("_", "").lower().startswith(stem)


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
        "backward",
        "bw_node",
        "bw_ops",
        "bw_site",
        "fwd",
        "fwd_site",
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
        # Forward ops' autograd nodes, per site: ``(numbers, sites, first_ops)``, where entry i
        # says the nodes this thread numbered from numbers[i] on (to the next entry) were made
        # by ops at sites[i], the first of them first_ops[i]. Appended only when the site
        # changes (a site-cache miss); trimmed by replacing the whole tuple, which readers on
        # other threads take once (the owner appends numbers last).
        self.fwd: tuple[list[int], list[SiteStats], list[str]] = ([], [], [])
        self.fwd_site: SiteStats | None = None
        # Backward ops of this thread that a forward line's op made the node of, by (id of the
        # line that ran them, id of the forward line): (that line, the forward line, {op:
        # [count, ms]}); merged into both lines' counts when read.
        self.backward: dict[
            tuple[int, int], tuple[SiteStats, SiteStats, dict[str, list[float]]]
        ] = {}
        self.bw_node: Any = None
        """The autograd node of the last backward op (its ops come one after another)."""
        self.bw_ops: dict[str, list[float]] | None = None
        self.bw_site: SiteStats | None = None

    def forget_frames(self) -> None:
        self.last_frame = self.last_user = self.last_site = None
        self.bw_node = self.bw_ops = self.bw_site = None

    def new_thread(self) -> None:
        """A new thread takes this state over: its autograd node numbers start again."""
        self.forget_frames()
        self.op = None
        self.synced = False
        self.in_comm = 0
        self.fwd = ([], [], [])
        self.fwd_site = None


_UNSEEN: Any = object()


OpInfo = tuple[str | None, Classifier | None, Callable[..., Any]]


def _op_info(func: Any) -> OpInfo:
    """Per-op facts, computed once per overload: the op's short name (None for metadata ops,
    which are skipped), its classifier, and what to call to run it: for a plain OpOverload its
    C++ op, whose Python ``__call__`` only forwards to it (one Python frame fewer per op)."""
    call = func._op if type(func) is OpOverload else func
    if func in METADATA_OPS:
        return None, None, call
    return str(func).removeprefix("aten."), CLASSIFIERS.get(func), call


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
        self._spare: list[_ThreadState] = []
        """States of threads that ended, for the next new thread (memory stays bounded when a
        thread is started per step, as DataParallel does)."""
        self.attributes_backward = _sequence_nr is not None and _current_node is not _no_node
        """Backward ops are also charged to the forward line whose op made their node."""
        self.backward_state: _ThreadState | None = None
        """The state of the thread that called the .backward() under way (its forward first)."""
        self._lock = threading.Lock()
        self._info: dict[str, OpInfo] = {}
        self.internal_errors: dict[str, list[Any]] = {}
        """op -> [count, first error]: ops whose copies and syncs could not be counted."""

    def internal_error(self, op: str, exc: BaseException) -> None:
        """Notes that the profiler failed on ``op`` (the op itself still ran, untouched)."""
        with self._lock:
            found = self.internal_errors.get(op)
            if found is None:
                text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                self.internal_errors[op] = [1, text]
            else:
                found[0] += 1

    # -- sites --------------------------------------------------------------------------------

    def state(self) -> _ThreadState:
        """This thread's state, on its first op made or taken over from a thread that ended."""
        st: _ThreadState | None = getattr(self._tls, "s", None)
        if st is None:
            with self._lock:
                if self._spare:
                    st = self._spare.pop()
                    st.new_thread()
                else:
                    st = _ThreadState()
                    self._states.append(st)
            self._tls.s = st
        return st

    def release_state(self) -> None:
        """The calling thread ends: its state, counts and all, goes to the next new thread."""
        st: _ThreadState | None = getattr(self._tls, "s", None)
        if st is None:
            return
        del self._tls.s
        st.forget_frames()
        with self._lock:
            self._spare.append(st)

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

    # -- backward ops charged to forward lines -------------------------------------------------

    def note_forward(self, st: _ThreadState, site: SiteStats, op: str) -> None:
        """The thread's ops moved to ``site`` (first ``op``): nodes made from here are its."""
        if not _grad_enabled() or _sequence_nr is None:
            return  # no node is made: the site's ops cannot be in a backward
        st.fwd_site = site
        numbers, sites, ops = st.fwd
        if len(numbers) >= 2 * FORWARD_ENTRIES:
            keep = len(numbers) - FORWARD_ENTRIES
            numbers, sites, ops = numbers[keep:], sites[keep:], ops[keep:]
            st.fwd = (numbers, sites, ops)
        sites.append(site)
        ops.append(op)
        # The counter already counts this op's own node, if it made one (autograd runs first).
        numbers.append(_sequence_nr())

    def backward_ops_of(
        self, st: _ThreadState, site: SiteStats, node: Any
    ) -> dict[str, list[float]] | None:
        """Where this thread counts the ops of autograd ``node`` run at ``site`` (the
        .backward() line): entries shared with the forward line whose op made the node, or
        None when no forward line is known (they then count at ``site`` alone).

        The node is looked up in the .backward() caller's thread first, then in the others
        (DataParallel replicas); a site is taken only if one of its ops can have made such a
        node, since node numbers are per thread and repeat across threads."""
        number = node._sequence_nr()
        if number >= _NO_FORWARD_OP:
            return None
        stem = _STEMS.get(type(node))
        if stem is None:
            stem = _stem_of(node)
        first = self.backward_state
        forward = None
        if first is not None:
            numbers, sites, _ops = first.fwd
            # The common case inlined (see _site_of_node): inside an entry, a known kind.
            i = bisect_right(numbers, number + 1, 0, len(numbers)) - 1
            if i >= 0 and numbers[i] != number + 1 and stem in sites[i].node_stems:
                forward = sites[i]
            else:
                forward = _site_of_node(first.fwd, number, stem)
        if forward is None:
            with self._lock:
                others = [o for o in self._states if o is not first and o.fwd[0]]
            for other in others:
                forward = _site_of_node(other.fwd, number, stem)
                if forward is not None:
                    break
            else:
                return None
        key = (id(site), id(forward))
        found = st.backward.get(key)
        if found is None:
            found = st.backward[key] = (site, forward, {})
        return found[2]

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
            backwards = [st.backward for st in self._states]
        merged: dict[tuple[str, int], SiteStats] = {}

        def copy_of(site: SiteStats) -> SiteStats:
            into = merged.get(site.key)
            if into is None:
                into = merged[site.key] = SiteStats(site.file, site.line, site.function, site.stack)
                into.source = site.source
            return into

        for table in tables:
            for site in list(table.values()):
                site.settle()
                copy_of(site).merge(site)
        for backward in backwards:
            for ran_at, forward, ops in list(backward.values()):
                # Ops run at the .backward() line for a node the forward line's op made: the
                # one line's own ops, the other's backward.
                copy_of(ran_at).add_ops(ops)
                copy_of(forward).merge_backward(ops)
        return list(merged.values())

    def forget_nodes(self) -> None:
        """Drop the autograd nodes kept per thread (a backward ended: with retain_graph, a
        kept node would keep its saved tensors alive)."""
        with self._lock:
            for st in self._states:
                st.bw_node = st.bw_ops = st.bw_site = None

    def forget_frames(self) -> None:
        """Drop the frames kept for the site cache (called when the profile ends)."""
        with self._lock:
            for st in self._states:
                st.forget_frames()


def _site_of_node(
    fwd: tuple[list[int], list[SiteStats], list[str]], number: int, stem: str
) -> SiteStats | None:
    numbers, sites, ops = fwd
    # NB: an entry's number was read inside its first op, after autograd made that op's node
    # (if it made one): node n was made by an op that saw n + 1.
    end = len(numbers)  # numbers are appended last: entries below this are whole
    i = bisect_right(numbers, number + 1, 0, end) - 1
    if i < 0:
        return None
    if numbers[i] == number + 1:
        # The first op at the first site entered at n + 1 made node n, or an op before it did.
        j = bisect_left(numbers, number + 1, 0, i + 1)
        if _made_by(ops[j], stem):
            return sites[j]
        i = j - 1
        if i < 0:
            return None
    site = sites[i]
    if stem in site.node_stems:
        return site
    if any(_made_by(op, stem) for op in list(site.op_breakdown)):
        site.node_stems.add(stem)  # only yes is kept: a site can gain the op later
        return site
    return None


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
    name, classifier, call = info
    if name is None or not recorder.active:  # metadata ops skip everything, the frame too
        return call(*args, **kwargs)
    depth = recorder.caller_depth
    if depth is None:
        frame = _current_caller(recorder, 1)
    else:
        try:
            frame = _getframe(depth)
        except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
            frame = None
    try:
        st: _ThreadState = recorder._tls.s
    except AttributeError:
        st = recorder.state()
    # NB: the profiler never raises into user code: anything of its own that fails is counted
    # as an internal error of this op, and the op runs as it would have (zero cost in 3.11
    # while nothing raises).
    try:
        # Site cache: the same calling frame means the same user frame above it; only when
        # the caller is the user frame itself can the line have moved (f_lasti says whether).
        if (
            frame is not None
            and frame is st.last_frame
            and (frame is not st.last_user or frame.f_lasti == st.last_lasti)
        ):
            site = st.last_site
            assert site is not None
        else:
            site = recorder._site(st, frame)
            if site is not st.fwd_site and recorder.attributes_backward:
                recorder.note_forward(st, site, name)
        # NB: only the per-op entry is counted here; the site's ops and kernel time are summed
        # from the entries when read (merged_sites), two attribute updates fewer per op.
        ops = site.op_breakdown
        if recorder.backward_site is not None:
            # An op of a backward under way counts in the entries it shares with the forward
            # line whose op made its node (merged into both lines when read); one node's ops
            # come one after another.
            node = _current_node()
            if node is not None:
                if node is not st.bw_node or site is not st.bw_site:
                    st.bw_node = node
                    st.bw_site = site
                    st.bw_ops = recorder.backward_ops_of(st, site, node)
                if st.bw_ops is not None:
                    ops = st.bw_ops
    except Exception as exc:
        recorder.internal_error(name, exc)
        return call(*args, **kwargs)
    entry = ops.get(name)
    if entry is None:
        entry = ops[name] = [0, 0.0]
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
            try:
                began = timer.begin(args, kwargs)
            except Exception as exc:
                recorder.internal_error(name, exc)
                began = None
            out = call(*args, **kwargs)
            if began is not None:
                try:
                    timed = timer.end(began, entry)  # credited to entry[1] once the GPU is there
                except Exception as exc:
                    recorder.internal_error(name, exc)
        elif recorder.host_timing:
            t = _perf_counter()
            out = call(*args, **kwargs)
            ms = (_perf_counter() - t) * 1000.0
            entry[1] += ms
        else:
            out = call(*args, **kwargs)
    finally:
        if traced:
            st.op = None
    if (classifier is not None or st.synced) and not st.in_comm:
        try:
            recorder.account(site, classifier, args, kwargs, out, ms, timed, st.synced)
        except Exception as exc:
            recorder.internal_error(name, exc)
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
