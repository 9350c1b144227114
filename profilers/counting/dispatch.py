"""The hot path: ``ProfilerMode.__torch_dispatch__`` for every op, in one Python function.

Kept lean on purpose (each call costs about as much as a dict lookup): a per-op info cache, a
per-thread site cache, and the op run through its C++ entry point. Everything it cannot do cheaply
goes to the recorder, and nothing it does of its own may raise into the user's code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from sys import _getframe
from time import perf_counter_ns as _ns
from types import FrameType
from typing import Any

from profilers.counting.backward import backward_ops_of, note_forward
from profilers.counting.comm import CommRule, comm_rule
from profilers.counting.ops import CLASSIFIERS, METADATA_OPS, Classifier
from profilers.counting.recorder import Recorder
from profilers.counting.threads import ThreadState
from profilers.timing.charge import charge_transfer, settle_op
from profilers.timing.timeline import COMM, StepClock
from profilers.torch_private import (
    OP_OVERLOAD_HAS_OP,
    OpOverload,
    composite_implicit,
    current_node,
    eval_frame,
    set_code_exec_strategy,
    set_eval_frame,
)

_current_node = current_node
_set_eval_frame = set_eval_frame


def hide_from_dynamo() -> bool:
    """Marks dispatch() for dynamo to skip; False where this torch cannot (see _mode.py), and
    then torch's own wrapper around __torch_dispatch__ stays."""
    mark = set_code_exec_strategy
    if mark is None or eval_frame is None:
        return False
    skip = eval_frame._FrameExecStrategy(
        eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT
    )
    mark(dispatch.__code__, skip)
    mark(_under_compile.__code__, skip)
    return True


_UNSEEN: Any = object()
_DECOMPOSE: Any = object()
"""The classifier of ops that reach the mode only where autograd is off (below)."""


def _decomposed(mode: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op autograd decomposes before any mode sees it (CompositeImplicitAutograd: ``to``,
    ``item``, ``cpu``...) reaches the mode whole where autograd is off (``torch.inference_mode``,
    inference tensors): run its decomposition with the mode on, so that the ops it is made of
    (``_to_copy``, ``_local_scalar_dense``) are counted as they are everywhere else. NB: not
    counted as an op itself, as it is not outside inference mode."""
    with mode:
        out = func.decompose(*args, **kwargs)
    if out is NotImplemented:  # no decomposition after all: the op as it is
        return func(*args, **kwargs)
    return out


OpInfo = tuple[str | None, Classifier | None, Callable[..., Any]]


def _op_info(func: Any) -> OpInfo:
    """Per-op facts, computed once per overload: the op's short name (None for metadata ops,
    which are skipped), its classifier, and what to call to run it: for a plain OpOverload its
    C++ op, whose Python ``__call__`` only forwards to it (one Python frame fewer per op)."""
    call = func._op if OP_OVERLOAD_HAS_OP and type(func) is OpOverload else func
    if func in METADATA_OPS:
        return None, None, call
    name = str(func).removeprefix("aten.")
    if func not in CLASSIFIERS and composite_implicit(func):
        return name, _DECOMPOSE, call
    rule = comm_rule(func)
    if rule is not None:
        return name, rule, call  # type: ignore[return-value]  # dispatch() tells them apart
    return name, CLASSIFIERS.get(func), call


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
    t_in = _ns()  # NB: first, so that all of the hot path's own time is measured (timing/)
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
        if name is None and recorder.step_clock is not None:
            return _metadata_timed(recorder, call, args, kwargs, t_in)
        return call(*args, **kwargs)
    if classifier is _DECOMPOSE:
        return _decomposed(mode, func, args, kwargs)
    depth = recorder.caller_depth
    if depth is None:
        frame = _current_caller(recorder, 1)
    else:
        try:
            frame = _getframe(depth)
        except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
            frame = None
    try:
        st: ThreadState = recorder._tls.s
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
                note_forward(st, site, name)
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
                    st.bw_ops = backward_ops_of(
                        recorder.threads, recorder.backward_state, st, site, node
                    )
                if st.bw_ops is not None:
                    ops = st.bw_ops
    except Exception as exc:
        recorder.internal_error(name, exc)
        return call(*args, **kwargs)
    entry = ops.get(name)
    if entry is None:
        entry = ops[name] = [0, 0.0]
    entry[0] += 1
    clock: StepClock | None = st.clock
    if classifier is not None and classifier.__class__ is CommRule:
        if clock is None:
            return recorder.collective(site, entry, classifier, call, args, kwargs)
        t_call = _ns()
        out = recorder.collective(site, entry, classifier, call, args, kwargs)
        settle_op(clock, site, t_in, t_call, _ns(), COMM)
        return out
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
            t_call = _ns()
            out = call(*args, **kwargs)
            t_ret = _ns()
            if began is not None:
                try:
                    timed = timer.end(began, entry)  # credited to entry[1] once the GPU is there
                except Exception as exc:
                    recorder.internal_error(name, exc)
        else:
            t_call = _ns()
            out = call(*args, **kwargs)
            t_ret = _ns()
            if recorder.host_timing:
                ms = (t_ret - t_call) / 1e6
                entry[1] += ms
    finally:
        if traced:
            st.op = None
    if clock is not None:
        # The host's time since the last event (less the profiler's cost outside this
        # function) and the op's own run are the line's host work (profilers/timing/).
        rec = clock.lines.get(site) or clock.line(site)
        rec.launch_ns += t_in - clock.last_ns - clock.outside_ns + t_ret - t_call
        clock.last_site = site
    found = None
    if (classifier is not None or st.synced) and not st.in_comm:
        try:
            found = recorder.account(site, classifier, args, kwargs, out, ms, timed, st.synced)
            if found is not None and clock is not None:
                charge_transfer(clock, site, found, t_ret - t_call, t_call)
        except Exception as exc:
            recorder.internal_error(name, exc)
    if recorder.step_clock is not None and recorder.step_clock.replay is not None:
        recorder.step_clock.replay.op(site, func, t_in, t_call, t_ret, found, timed)  # timing/
    if timed is not None:
        timer.queue(timed)  # type: ignore[union-attr]
    if clock is not None:
        t_out = _ns()
        clock.own_ns += t_call - t_in + t_out - t_ret + clock.outside_ns
        clock.ops += 1
        clock.last_ns = t_out
    return out


def _metadata_timed(
    recorder: Recorder, call: Callable[..., Any], args: tuple[Any, ...], kwargs: Any, t_in: int
) -> Any:
    """A metadata op (a view, ``detach``...) on the profile's thread: not charged to a line,
    but the profiler's time on it is its own. NB: moving ``last_ns`` on by that time keeps it
    out of the host work charged at the next op."""
    st: ThreadState | None = getattr(recorder._tls, "s", None)
    clock = None if st is None else st.clock
    if clock is None:
        return call(*args, **(kwargs or {}))
    t_call = _ns()
    out = call(*args, **(kwargs or {}))
    t_ret = _ns()
    own = t_call - t_in + clock.outside_ns + _ns() - t_ret
    clock.own_ns += own
    clock.last_ns += own
    clock.ops += 1
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
