"""The recorder: what a profile counted, per thread and per line (fed by counting/dispatch.py;
per-thread state: threads.py; the backward's attribution to forward lines: backward.py)."""

from __future__ import annotations

import linecache
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import torch

from profilers.counting.comm import CommRule
from profilers.counting.graph_lines import GraphLines, GraphPlace
from profilers.counting.ops import Transfer, default_is_pinned
from profilers.counting.origins import Provenance, note_batch, origin_of, source_of
from profilers.counting.threads import ThreadState, ThreadStates
from profilers.counting.user_code import UNKNOWN, UserCode, inside_tensor_printing, statement
from profilers.errors import OpFailure
from profilers.memory.tracker import MemoryTracker
from profilers.names import COPY_TO_HOST, OTHER, SYNCHRONIZE
from profilers.origins import FACTORY, OriginCount
from profilers.stats import MAX_STACKS, Counters, LineStats, OpCount
from profilers.timing.cuda_events import CudaApi, CudaTimer, TimedOp, TorchCuda
from profilers.timing.timeline import StepClock
from profilers.torch_private import BACKWARD_NODES

if TYPE_CHECKING:
    from profilers.counting.dispatch import OpFacts
    from profilers.counting.ops import Args, Call, Classifier, IsPinned, Kwargs, Scope
    from profilers.timing.oplog import OpLog


class Recorder:
    """Aggregates per line, in one table per thread (merged on demand), so threads never contend.
    ``kernel_timing``: CUDA events on GPUs, host time on the CPU; ``timeline_capacity``: the
    newest copy/sync events kept; ``clock``: their seconds (op times use time.perf_counter);
    ``is_pinned``: whether a host tensor is pinned (tests inject one for fake tensors)."""

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
        self.graph_lines = GraphLines(user)
        """The lines of copies and syncs made inside compiled graphs (the fast path's)."""
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
        self.counting = "every_op"
        """Or ``"copies"``: the fast path sees only the ops that copy, sync or communicate."""
        self.own_sync = False
        """True while the profiler itself waits on the GPU (its one final synchronize)."""
        self.trace_syncs = False
        """Syncs come from PyTorch's GPU trace callbacks (opt-in) rather than the entry points."""
        self.backward_line: LineStats | None = None
        """The user line of the .backward()/autograd.grad call under way, for autograd threads."""
        self.timeline: deque[tuple[float, str | None, int, str | None, str, bool, bool]] = deque(
            maxlen=max(0, timeline_capacity)
        )
        self.timeline_capacity = timeline_capacity
        self.events_recorded = 0
        self.devices: set[str] = set()
        self.threads = ThreadStates()
        self.local = self.threads.tls
        """``local.s``: the thread's :class:`ThreadState` (AttributeError before :meth:`state`
        makes it); the hot paths' one load per op, not a call."""
        self.state = self.threads.state  # this thread's, made on its first op (threads.py)
        self.release_state = self.threads.release
        self.attributes_backward = BACKWARD_NODES  # also charged to their node's forward line
        self.backward_state: ThreadState | None = None
        """The state of the thread that called the .backward() under way (its forward first)."""
        self._lock = threading.Lock()
        self.op_facts: dict[str, OpFacts] = {}
        """The hot path's ``OpFacts`` (profilers/counting/dispatch.py) by qualified op name."""
        self._steps: dict[str, int] = {}  # steps ended, by how they were told (see step())
        self.step_number = 0
        """Steps ended so far: the step the ops now running belong to."""
        self.batches = 0  # DataLoader batches pulled
        self.step_ends: deque[tuple[int, float]] = deque(maxlen=max(0, timeline_capacity))
        """(step number, seconds since the start) of the newest step ends (the trace's slices)."""
        self.on_step: Callable[[], None] | None = None
        """Runs after each step (a --steps window opening or closing)."""
        self.internal_errors: dict[str, OpFailure] = {}
        """Ops whose copies and syncs could not be counted."""
        self.step_clock: StepClock | None = None
        """Where the time of each step goes, on the profile's own thread (None: not measured)."""
        self.input_scope: Scope | None = None
        """What an input wait runs inside (profilers/patches.py ``quiet_inputs``), if anything."""
        self.replay: OpLog | None = None
        """The step replay's records, only for ``what_if``/``gpu``: None keeps it off the hot path."""
        self.memory: MemoryTracker | None = None  # who made each storage (profilers/memory/)
        self.failure: dict[str, object] | None = None  # the latest device mismatch/OOM, explained
        self.provenance = Provenance()
        """The host storages factory ops made and loaders returned (the copies' origins)."""
        self.lib_lines = False
        """``--lib-lines``: a library's copy or sync is charged to the library's line."""

    def internal_error(self, op: str, exc: BaseException) -> None:
        """Notes that the profiler failed on ``op`` (the op itself still ran, untouched)."""
        with self._lock:
            found = self.internal_errors.get(op)
            if found is None:
                text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                self.internal_errors[op] = OpFailure(1, text)
            else:
                found.count += 1

    # -- lines --------------------------------------------------------------------------------

    def line_for(self, frame: FrameType | None) -> LineStats:
        """The line of the innermost user frame, else the running backward call, else unknown."""
        return self.line_in(self.state(), frame)

    def line_in(self, st: ThreadState, frame: FrameType | None) -> LineStats:
        """:meth:`line_for` given the thread's state (the hot paths have it), via its line cache."""
        table = st.table
        f = self.user.first(frame)
        if f is None:
            return self._borrowed_line(table)
        if f is st.last_user and f.f_lasti == st.last_lasti:
            # A new library frame under the same user call (the next module of model(x)).
            line = st.last_line
            assert line is not None
            st.last_frame = frame
            return line
        code = f.f_code
        lineno = f.f_lineno
        key = (code.co_filename, lineno)
        line = table.get(key)
        if line is None:
            line = LineStats(
                self.user.display(code.co_filename), lineno, code.co_name, self.user.chain(f)
            )
            line.source = linecache.getline(code.co_filename, lineno).strip()
            line.callers = {self.user.caller_key(f)}
            table[key] = line
        elif len(line.callers) < MAX_STACKS:
            # A line reached from a new caller (a helper called from two places) keeps that
            # chain too; the key is the next user frame up, one short walk.
            caller = self.user.caller_key(f)
            if caller not in line.callers:
                line.callers.add(caller)
                line.add_stack(self.user.chain(f))
        st.last_frame, st.last_user, st.last_lasti, st.last_line = frame, f, f.f_lasti, line
        return line

    def counted_line(
        self, st: ThreadState, frame: FrameType | None
    ) -> tuple[LineStats, FrameType | None, tuple[str, int, str] | None]:
        """The line of a copy or sync the fast path counted, the frame ``apply`` seeks its library
        frame from, and a compiled graph's recorded library frame (a graph's own frames are
        torch.fx's and dynamo's plumbing, never the library's: none is walked)."""
        in_graph = self.graph_line(st, frame)
        if in_graph is None:
            return self.line_in(st, frame), frame, None
        return in_graph[0], None, in_graph[1].library

    def graph_line(
        self, st: ThreadState, frame: FrameType | None
    ) -> tuple[LineStats, GraphPlace] | None:
        """A compiled graph's copy or sync at its op's own line, as dynamo traced it; None where
        no graph called the op. Per copy or sync, never per op."""
        place = self.graph_lines.place(frame)
        if place is None:
            return None
        key = (place.file, place.line)
        line = st.table.get(key)
        if line is None:
            user = self.user
            ran_in = user.first(frame)  # the compiled function's frame, running the graph
            callers = [f"{user.display(f)}:{n} {fn}" for f, n, fn in place.callers]
            callers += user.chain(ran_in) if ran_in is not None else []
            line = LineStats(user.display(place.file), place.line, place.function, callers[:8])
            line.source = linecache.getline(place.file, place.line).strip()
            line.callers = {user.caller_key(ran_in) if ran_in is not None else None}
            st.table[key] = line
        return line, place

    def _borrowed_line(self, table: dict[tuple[str, int], LineStats]) -> LineStats:
        # NB: autograd's device threads run backward ops with no Python frame of the user's on
        # their stack; they belong to the .backward() call the user is blocked in.
        origin = self.backward_line
        key = origin.key if origin is not None else UNKNOWN
        line = table.get(key)
        if line is None:
            if origin is None:
                line = LineStats(UNKNOWN[0], UNKNOWN[1], "<no user frame>")
            else:
                line = LineStats(origin.file, origin.line, origin.function, origin.stack)
                line.source = origin.source
            table[key] = line
        return line

    def _library_line(self, line: LineStats, frame: FrameType) -> LineStats:
        """``--lib-lines``: the line of the library frame that made the op, its callers the
        user's lines; ``line`` when the user's line did. Per copy or sync, never per op."""
        found = self.user.library_code(frame)
        if found is None:
            return line
        code = found.f_code
        lineno = found.f_lineno
        table = self.state().table
        key = (code.co_filename, lineno)
        chain = [f"{line.file}:{line.line} {line.function}", *line.stack]
        lib = table.get(key)
        if lib is None:
            lib = LineStats(self.user.library_name(code.co_filename), lineno, code.co_name, chain)
            lib.source = statement(code.co_filename, lineno)
            lib.callers = {line.key}
            table[key] = lib
        elif len(lib.callers) < MAX_STACKS and line.key not in lib.callers:
            lib.callers.add(line.key)
            lib.add_stack(chain)
        return lib

    # -- the hot path -------------------------------------------------------------------------

    def account(
        self,
        line: LineStats,
        classifier: Classifier | None,
        args: Args,
        kwargs: Kwargs,
        out: object,
        ms: float,
        timed: TimedOp | None,
        synced: bool,
        frame: FrameType | None = None,
    ) -> Transfer | list[Transfer] | None:
        """What the op's rule finds, else ``other`` when the GPU trace saw it make the host wait
        (``synced``); returns what it counted (the step clock charges the op's time by it)."""
        if classifier is not None:
            transfer = classifier(args, kwargs, out, self.is_pinned)
            if transfer is not None:
                self.apply_found(line, transfer, args, frame, None, ms, timed)
                return transfer
        if synced:
            found = Transfer(None, sync=OTHER)
            self.apply(line, found, frame=frame)
            return found
        return None

    def apply(
        self,
        line: LineStats,
        t: Transfer,
        ms: float = 0.0,
        timed: TimedOp | None = None,
        frame: FrameType | None = None,
        made_at: tuple[str, int, str] | None = None,
    ) -> None:
        """Counts ``t`` at ``line``: ``ms`` the op's host time or ``timed`` its CUDA record
        (credited when its events complete); ``frame`` (the op's caller) or ``made_at`` (a
        compiled graph's record) names the library frame that made it."""
        # NB: a copy of symbolic size (nbytes None) counts, its bytes apart (Copies.unknown_bytes);
        # the byte sums and the timeline take it as 0.
        nbytes = t.nbytes or 0
        if made_at is not None or frame is not None:  # here only: never per op
            if self.lib_lines and frame is not None:
                line = self._library_line(line, frame)
            else:
                self.user.note_library(
                    line.libraries,
                    frame,
                    t.direction is not None,
                    nbytes,
                    t.sync,
                    t.pageable,
                    made_at,
                )
        if t.direction is not None:
            copies = line.copies(t.direction)
            copies.add(t.nbytes, t.pageable, t.non_blocking)
            copies.time_ms += ms
            if timed is not None:
                timed.copies = copies  # its GPU time goes to the copies too
            if t.dtype is not None:
                line.copy_dtypes[t.dtype] = line.copy_dtypes.get(t.dtype, 0) + nbytes
            if t.src is not None:
                self.devices.add(t.src)
            if t.dst is not None:
                self.devices.add(t.dst)
        if t.sync is not None:
            line.syncs.add(t.sync)
        if line.last_step != self.step_number:  # NB: two int reads per copy/sync, no more
            line.last_step = self.step_number
            line.steps_active += 1
        self.events_recorded += 1
        event = (self.clock() - self.t0, t.direction, nbytes, t.sync, f"{line.file}:{line.line}")
        self.timeline.append((*event, t.pageable, t.non_blocking))

    def apply_found(
        self,
        line: LineStats,
        found: Transfer | list[Transfer],
        args: Args,
        frame: FrameType | None,
        made_at: tuple[str, int, str] | None = None,
        ms: float = 0.0,
        timed: TimedOp | None = None,
    ) -> None:
        """Counts what an op's rule found, each host-to-GPU copy with its tensor's origin; the
        op's time (see :meth:`apply`) goes with its first part."""
        for i, t in enumerate(found if isinstance(found, list) else (found,)):
            self.apply(line, t, ms if i == 0 else 0.0, timed if i == 0 else None, frame, made_at)
            if t.direction == "h2d":
                self.note_origin(line, t, args, frame)

    def note_origin(
        self, line: LineStats, t: Transfer, args: Args, frame: FrameType | None
    ) -> None:
        """Where the copied tensor came from, counted at ``line``; at copies only."""
        origin, maker, op = (
            (FACTORY, line, t.made_by)  # the op made its data and copied it (ops._lift_fresh)
            if t.made_by is not None
            else origin_of(source_of(args), t.pageable, frame, self.provenance, self.memory, line)
        )
        found = line.origins.get(origin)
        if found is None:
            found = line.origins[origin] = OriginCount()
        made_at = None if maker is None else f"{maker.file}:{maker.line}"
        found.add(t.nbytes or 0, t.pageable, t.non_blocking, made_at, op)

    def loader_batch(
        self, it: object, batch: object, frame: FrameType | None, wait_ns: int
    ) -> None:
        """A DataLoader batch: its tensors are a loader's, its line keeps the loader's settings
        and the wait."""
        self.batches += 1  # NB: counted outside a step window too (patches.count_steps)
        if not self.active:
            return
        try:
            note_batch(self.provenance, self.line_for(frame), it, batch, wait_ns)
        except Exception as exc:  # never into user code: the batch goes back as it came
            self.internal_error("DataLoader.__next__", exc)

    def collective(
        self,
        line: LineStats,
        entry: OpCount | None,
        rule: CommRule,
        call: Call,
        args: Args,
        kwargs: Kwargs,
    ) -> object:
        """Runs and counts a collective (or a wait on one) with its host time: the host's wait
        where the backend blocks."""
        t = time.perf_counter()
        out = call(*args, **kwargs)
        ms = (time.perf_counter() - t) * 1000.0
        try:
            if self.host_timing and entry is not None:
                entry.ms += ms
            if rule.op is None:
                line.comm.wait_ms += ms
            else:
                line.comm.add(rule.op, rule.nbytes(args), ms)
        except Exception as exc:
            self.internal_error(rule.op or "wait", exc)
        return out

    def step(self, source: str) -> None:
        """A step ended (``optimizer``: an optimizer's step; ``manual``: profilers.step())."""
        clock = self.step_clock
        if clock is not None and getattr(self.local, "s", None) is not None:
            if self.local.s.clock is clock:  # a step ended by the profile's own thread
                clock.close(time.perf_counter_ns(), reopen=time.perf_counter_ns)
        with self._lock:
            self._steps[source] = self._steps.get(source, 0) + 1
            self.step_number += 1
            self.step_ends.append((sum(self._steps.values()) - 1, self.clock() - self.t0))
        if self.on_step is not None:
            self.on_step()

    def steps_seen(self) -> dict[str, object] | None:
        """``{"count", "source"}`` of the steps seen (optimizer steps first), None for none."""
        for source in ("optimizer", "manual"):
            n = self._steps.get(source, 0)
            if n:
                return {"count": n, "source": source}
        return None

    def waited(self, line: LineStats, ms: float) -> None:
        """``work.wait()`` took ``ms`` at ``line``."""
        line.comm.wait_ms += ms

    def clock_here(self) -> StepClock | None:
        """The step clock when the calling thread is the profile's own, else None."""
        st: ThreadState | None = getattr(self.local, "s", None)
        return None if st is None else st.clock

    def timed_wait(
        self,
        frame: FrameType | None,
        kind: str,
        cause: str | None,
        enter_ns: int,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """A wait the mode never sees (a loader's ``__next__``, ``work.wait()``, a synchronize),
        charged on the step clock."""
        clock = self.clock_here()
        if clock is not None:
            line = self.line_for(frame)
            clock.wait(line, kind, cause, enter_ns, start_ns, end_ns, time.perf_counter_ns())

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
        if kind == "stream" and inside_tensor_printing(frame):
            # NB: printing a CUDA tensor copies it to the host with every mode disabled
            # (torch/_tensor_str.py), so only this stream synchronisation shows it.
            cause = COPY_TO_HOST
        self.apply(self.line_for(frame), Transfer(None, sync=cause), frame=frame)

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

    def merged_lines(self) -> list[LineStats]:
        """All threads' lines merged by (file, line), a fresh copy safe to read."""
        states = self.threads.all()
        merged: dict[tuple[str, int], LineStats] = {}

        def copy_of(line: LineStats) -> LineStats:
            into = merged.get(line.key)
            if into is None:
                into = merged[line.key] = LineStats(line.file, line.line, line.function)
                into.source = line.source
            return into

        for st in states:
            for line in list(st.table.values()):
                line.settle()
                copy_of(line).merge(line)
        for st in states:
            for entry in list(st.backward.values()):
                # Ops run at the .backward() line for a node the forward line's op made: the
                # one line's own ops, the other's backward.
                copy_of(entry.ran_at).add_ops(entry.ops)
                copy_of(entry.forward).merge_backward(entry.ops)
        return list(merged.values())

    def forget_nodes(self) -> None:
        """A backward ended: with retain_graph, a kept node would keep its saved tensors alive."""
        for st in self.threads.all():
            st.bw_node = st.bw_ops = st.bw_line = None

    def forget_frames(self) -> None:
        """Drop the frames kept for the line cache (called when the profile ends)."""
        for st in self.threads.all():
            st.forget_frames()


def totals_of(lines: list[LineStats]) -> Counters:
    total = Counters()
    for s in lines:
        total.merge(s)
    return total
