"""The hot path: ``ProfilerMode.__torch_dispatch__`` for every op, in one Python function.

Kept lean on purpose (each call costs about as much as a dict lookup): a per-op info cache, a
per-thread line cache, and the op run through its C++ entry point. Everything it cannot do cheaply
goes to the recorder, and nothing it does of its own may raise into the user's code.
"""

from __future__ import annotations

import os
import sys
from sys import _getframe
from time import perf_counter_ns as _ns
from types import FrameType
from typing import TYPE_CHECKING, cast

from profilers.counting.backward import backward_ops_of, note_forward
from profilers.counting.comm import CommRule, comm_rule
from profilers.counting.ops import CLASSIFIERS, METADATA_OPS, Transfer
from profilers.counting.origins import is_factory, note_made
from profilers.counting.recorder import Recorder
from profilers.counting.threads import ThreadState
from profilers.memory.failure import failed
from profilers.stats import LineStats, OpCount
from profilers.timing.charge import charge_transfer, settle_op
from profilers.timing.cuda_events import TimedOp
from profilers.timing.gaps import LONG_GAP_NS
from profilers.timing.timeline import COMM, StepClock
from profilers.torch_private import (
    OP_OVERLOAD_HAS_OP,
    OpOverload,
    composite_implicit,
    current_node,
    set_eval_frame,
)

if TYPE_CHECKING:
    from profilers.counting.mode import ProfilerMode
    from profilers.counting.ops import Args, Call, Classifier, Kwargs

_current_node = current_node
_set_eval_frame = set_eval_frame


def _decomposed(mode: ProfilerMode, func: OpOverload, args: Args, kwargs: Kwargs) -> object:
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


DECOMPOSE = "decompose"
COLLECTIVE = "collective"
FACTORY = "factory"


class OpFacts:
    """What the hot path needs of one op overload, computed once (:func:`op_facts`).

    ``name`` is the op's short name, None for metadata ops (views, ``detach``: skipped);
    ``classifier`` its copy/sync rule (profilers/counting/ops.py) or None; ``call`` what runs it
    (for a plain OpOverload its C++ op: ``OpOverload.__call__`` is a Python frame that only
    forwards to it); ``special`` says the op takes another road: ``"collective"`` (a comm rule,
    timed and counted whole) or ``"decompose"`` (reaches the mode whole where autograd is off)."""

    __slots__ = ("call", "classifier", "name", "special")

    def __init__(
        self,
        name: str | None,
        classifier: Classifier | CommRule | None,
        call: Call,
        special: str | None = None,  # DECOMPOSE, COLLECTIVE (compared by identity)
    ) -> None:
        self.name = name
        self.classifier = classifier
        self.call = call
        self.special = special


def op_facts(func: OpOverload) -> OpFacts:
    """The :class:`OpFacts` of ``func``."""
    call = func._op if OP_OVERLOAD_HAS_OP and type(func) is OpOverload else func
    if func in METADATA_OPS:
        return OpFacts(None, None, call)
    name = str(func).removeprefix("aten.")
    if func not in CLASSIFIERS and composite_implicit(func):
        return OpFacts(name, None, call, DECOMPOSE)
    rule = comm_rule(func)
    if rule is not None:
        return OpFacts(name, rule, call, COLLECTIVE)
    return OpFacts(name, CLASSIFIERS.get(func), call, FACTORY if is_factory(name) else None)


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


def dispatch(  # noqa: C901 - the hot path kept in one frame: a call per branch costs every op
    mode: ProfilerMode,
    func: OpOverload,
    types: object,
    args: Args = (),
    kwargs: dict[str, object] | None = None,
) -> object:
    """``ProfilerMode.__torch_dispatch__``: the hot path. What every op runs is here, in order
    (find the op's facts, its caller's line, count it, run it, charge its time, classify it);
    what only some ops need is in the functions below it, called on their branch only (NB: a
    call costs about as much as a dict lookup, so the common path makes none of its own)."""
    t_in = _ns()  # NB: first, so that all of the hot path's own time is measured (timing/)
    prior = _set_eval_frame(None)
    if prior is not None:
        # Under torch.compile: dynamo's frame callback was set. It stays cleared while the op
        # runs (what torch's own wrapper does), so dynamo never traces the profiler.
        return _under_compile(prior, mode, func, types, args, kwargs)
    recorder: Recorder = mode.recorder
    if kwargs is None:
        kwargs = {}
    # -- the op's facts: one dict lookup (NB: keyed by "aten::add.Tensor", OpOverload hashes in
    # Python)
    facts: OpFacts | None = recorder.op_facts.get(func._name)
    if facts is None:
        facts = recorder.op_facts[func._name] = op_facts(func)
    name = facts.name
    if name is None or not recorder.active:  # metadata ops skip everything, the frame too
        if name is None and recorder.step_clock is not None:
            return _metadata_timed(recorder, facts.call, args, kwargs, t_in)
        return facts.call(*args, **kwargs)
    special = facts.special
    if special is DECOMPOSE:
        return _decomposed(mode, func, args, kwargs)
    # -- where it was called from, and this thread's state
    depth = recorder.caller_depth
    if depth is None:
        frame = _current_caller(recorder, 1)
    else:
        try:
            frame = _getframe(depth)
        except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
            frame = None
    try:
        st: ThreadState = recorder.local.s
    except AttributeError:
        st = recorder.state()
    # -- its line (NB: the profiler never raises into user code: what fails of its own is an
    # internal error of this op, and the op runs as it would have; free in 3.11 until it raises)
    try:
        # Line cache: the same calling frame means the same user frame above it; only when
        # the caller is the user frame itself can the line have moved (f_lasti says whether).
        if (
            frame is not None
            and frame is st.last_frame
            and (frame is not st.last_user or frame.f_lasti == st.last_lasti)
        ):
            line = st.last_line
            assert line is not None
        else:
            line = recorder.line_in(st, frame)
            if line is not st.fwd_line and recorder.attributes_backward:
                note_forward(st, line, name)
        # NB: only the per-op entry is counted here; the line's ops and kernel time are summed
        # from the entries when read (merged_lines), two attribute updates fewer per op.
        ops = line.op_breakdown
        if recorder.backward_line is not None:
            # An op of a backward under way counts in the entries it shares with the forward
            # line whose op made its node; one node's ops come one after another.
            node = _current_node()
            if node is not None:
                if node is not st.bw_node or line is not st.bw_line:  # once per node
                    st.bw_node, st.bw_line = node, line
                    st.bw_ops = backward_ops_of(
                        recorder.threads, recorder.backward_state, st, line, node
                    )
                if st.bw_ops is not None:
                    ops = st.bw_ops
    except Exception as exc:
        recorder.internal_error(name, exc)
        return facts.call(*args, **kwargs)
    # -- count it
    entry = ops.get(name)
    clock: StepClock | None = st.clock
    if entry is None:
        entry = ops[name] = OpCount()
        if clock is not None and clock.prober is not None and facts.classifier is None:
            # its cost outside this function, measured on its own arguments (timing/)
            clock.prober.note(clock, entry, line, func, facts.call, args, kwargs)
    entry.count += 1
    if special is COLLECTIVE:  # (DECOMPOSE went its way above)
        return _collective(recorder, clock, line, entry, facts, args, kwargs, t_in)
    # -- run it, timed
    timer = recorder.timer
    try:
        if timer is None and not recorder.trace_syncs:
            timed: TimedOp | None = None
            t_call = _ns()
            out = facts.call(*args, **kwargs)
            t_ret = _ns()
        else:
            out, timed, t_call, t_ret = _run_watched(recorder, st, func, facts, entry, args, kwargs)
    except BaseException as exc:  # explained, and our frames taken out (profilers/memory/)
        raise failed(recorder, line, name, func, args, kwargs, exc)  # noqa: B904
    if recorder.host_timing:  # no GPU: the op's host time is its kernel time
        entry.ms += (t_ret - t_call) / 1e6
    if special is FACTORY:  # where a tensor copied later came from (counting/origins.py)
        try:
            note_made(recorder.provenance, line, name, out)
        except Exception as exc:
            recorder.internal_error(name, exc)
    memory = recorder.memory
    if memory is not None:  # which line holds which GPU bytes (--memory, profilers/memory/)
        try:
            memory.made(line, name, out)
        except Exception as exc:
            recorder.internal_error(name, exc)
    if clock is not None:
        # The host's time since the last event (less the profiler's cost outside this
        # function) and the op's own run are the line's host work (profilers/timing/).
        gap = t_in - clock.last_ns
        rec = clock.lines.get(line) or clock.line(line)
        outside = clock.outside_ns if recorder.backward_line is None else clock.outside_backward_ns
        rec.launch_ns += gap - outside + t_ret - t_call
        if gap >= LONG_GAP_NS:  # named by samples (profilers/timing/gaps.py)
            clock.long_gap(t_in, line)  # NB: before last_line moves on (the gap's op before)
        clock.last_line = line
    # -- what it copied or synced
    found = None
    if (facts.classifier is not None or st.synced) and not st.in_comm:
        ms = (t_ret - t_call) / 1e6 if recorder.host_timing else 0.0
        found = _account(
            recorder, clock, line, facts, args, kwargs, out, ms, timed, st, t_call, t_ret, frame
        )
    # The step replay's record of the op (profilers/timing/oplog.py), only where the run asked
    # for a replay (--what-if, --gpu NAME): every thread's ops (autograd's run the backward).
    if timed is not None:
        # what the GPU timeline places it by (profilers/timing/gpu_time.py)
        timed.line = line
        timed.found = found
        timed.queued_ns = t_call
        if recorder.replay is not None:
            recorder.replay.op(line, func, t_in, t_call, t_ret, found, timed)
        timer.queue(timed)  # type: ignore[union-attr]
    elif recorder.replay is not None:
        recorder.replay.op(line, func, t_in, t_call, t_ret, found, timed)
    if clock is not None:
        t_out = _ns()
        clock.own_ns += t_call - t_in + t_out - t_ret + outside
        clock.ops += 1
        clock.last_ns = t_out
    elif st.inside is not None:  # an input iterator's op: our time kept out of its wait
        st.inside.add(t_call - t_in + _ns() - t_ret)
    return out


def _collective(
    recorder: Recorder,
    clock: StepClock | None,
    line: LineStats,
    entry: OpCount,
    facts: OpFacts,
    args: Args,
    kwargs: dict[str, object],
    t_in: int,
) -> object:
    """A collective (or a wait on one): run and counted whole, its host time on the clock."""
    rule = cast(CommRule, facts.classifier)  # a COLLECTIVE's (op_facts), not checked per op
    if clock is None:
        return recorder.collective(line, entry, rule, facts.call, args, kwargs)
    t_call = _ns()
    out = recorder.collective(line, entry, rule, facts.call, args, kwargs)
    settle_op(clock, line, t_in, t_call, _ns(), COMM)
    return out


def _run_watched(
    recorder: Recorder,
    st: ThreadState,
    func: OpOverload,
    facts: OpFacts,
    entry: OpCount,
    args: Args,
    kwargs: dict[str, object],
) -> tuple[object, TimedOp | None, int, int]:
    """The op run with CUDA events around it (kernel time on a GPU) and/or with the GPU trace
    listening (``--trace-syncs``: a sync it reports while the op runs is the op's): the
    output, the timing record to queue, and when the call began and returned."""
    timed = began = None
    timer = recorder.timer
    traced = recorder.trace_syncs
    if traced:
        st.op = func
        st.synced = False
    try:
        if timer is not None:
            try:
                began = timer.begin(args, kwargs)
            except Exception as exc:
                recorder.internal_error(str(facts.name), exc)
        t_call = _ns()
        out = facts.call(*args, **kwargs)
        t_ret = _ns()
        if began is not None:
            try:
                timed = timer.end(began, entry)  # type: ignore[union-attr]  # credited later
            except Exception as exc:
                recorder.internal_error(str(facts.name), exc)
    finally:
        if traced:
            st.op = None
    return out, timed, t_call, t_ret


def _account(
    recorder: Recorder,
    clock: StepClock | None,
    line: LineStats,
    facts: OpFacts,
    args: Args,
    kwargs: dict[str, object],
    out: object,
    ms: float,
    timed: TimedOp | None,
    st: ThreadState,
    t_call: int,
    t_ret: int,
    frame: FrameType | None,
) -> Transfer | list[Transfer] | None:
    """An op with a copy/sync rule (or one the GPU trace saw sync): counted, and on the step
    clock its time moved to the wait it made; what it copied or synced (None: nothing)."""
    found = None
    try:
        rule = cast("Classifier | None", facts.classifier)  # not a COLLECTIVE (dispatch's)
        found = recorder.account(line, rule, args, kwargs, out, ms, timed, st.synced, frame)
        if found is not None and clock is not None:
            charge_transfer(clock, line, found, t_ret - t_call, t_call, timed)
    except Exception as exc:
        recorder.internal_error(str(facts.name), exc)
    return found


def _metadata_timed(
    recorder: Recorder, call: Call, args: Args, kwargs: Kwargs, t_in: int
) -> object:
    """A metadata op (a view, ``detach``...) on the profile's thread: not charged to a line,
    but the profiler's time on it is its own. NB: moving ``last_ns`` on by that time keeps it
    out of the host work charged at the next op."""
    st: ThreadState | None = getattr(recorder.local, "s", None)
    clock = None if st is None else st.clock
    if clock is None and (st is None or st.inside is None):
        return call(*args, **(kwargs or {}))
    t_call = _ns()
    out = call(*args, **(kwargs or {}))
    t_ret = _ns()
    if clock is None:  # inside an input wait (timing/inputs.py)
        assert st is not None and st.inside is not None
        st.inside.add(t_call - t_in + _ns() - t_ret)
        return out
    outside = clock.outside_ns if recorder.backward_line is None else clock.outside_backward_ns
    own = t_call - t_in + outside + _ns() - t_ret
    clock.own_ns += own
    clock.last_ns += own
    clock.ops += 1
    return out


def _under_compile(
    prior: object,
    mode: ProfilerMode,
    func: OpOverload,
    types: object,
    args: Args,
    kwargs: dict[str, object] | None,
) -> object:
    """dispatch() with dynamo's callback ``prior`` cleared, restored after (both are marked for
    dynamo to skip: profilers/counting/mode.py). The op's caller is
    then two frames further up; the line lookup walks past these frames (profilers' own)."""
    try:
        return dispatch(mode, func, types, args, kwargs)
    finally:
        _set_eval_frame(prior)
