"""``profilers.profile()``: the context manager users and gpuwatch's CLI hold."""

from __future__ import annotations

import datetime as _dt
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from operator import attrgetter
from typing import Any

from profilers import patches as _patches
from profilers import registry
from profilers.compiled import DynamoMark, EagerCalls, compiled_section, dynamo_mark, run_eager
from profilers.counting import kernels as _kernels
from profilers.counting.calibrate import start_clock
from profilers.counting.devices import describe_devices
from profilers.counting.kernels import CountingKernels
from profilers.counting.mode import ProfilerMode
from profilers.counting.no_gpu import GpuQuestions
from profilers.counting.ops import IsPinned
from profilers.counting.recorder import Recorder, totals_of
from profilers.counting.user_code import UserCode
from profilers.counting.user_fake import per_thread_kernel_flag
from profilers.counting.window import StepWindow, window_steps
from profilers.errors import ProfileStateError, SlowerCounting
from profilers.memory.failure import escaped
from profilers.memory.section import live_memory, memory_section, start_memory
from profilers.options import Options, RunOptions
from profilers.records import Line, Totals
from profilers.report import Report
from profilers.sections import Compiled, MemoryView, Predicted, Timeline, TimeView, WhatIf, typed
from profilers.timing.cuda_events import CudaApi
from profilers.timing.gaps import sample_gaps
from profilers.timing.gpu_time import start_gpu_time
from profilers.timing.inputs import patch_input, resolve_inputs
from profilers.timing.oplog import OpLog
from profilers.timing.replayed import sections, simulated_gpus, start_log, time_view_on
from profilers.timing.verdict import last_step

_ENTER_LOCK = threading.Lock()
_BUSIEST = attrgetter("syncs.count", "bytes_moved", "kernel_time_ms", "ops")  # the lines' order
#: The timeline's event tuples (the recorder's), as the report's keys.
_EVENT_KEYS = ("t", "direction", "bytes", "sync", "site", "pageable", "non_blocking")


def explain_escaped(exc: BaseException) -> None:
    """The running profile explains ``exc``, a script's error that no op raised, for runners that
    catch the script's errors inside the profile (as the CLI's does)."""
    recorder = registry.ACTIVE
    if recorder is not None:
        escaped(exc, recorder)


class Profile:
    """A single-use profile; see :func:`profilers.profile`."""

    def __init__(
        self, options: Options, is_pinned: IsPinned | None = None, cuda: CudaApi | None = None
    ) -> None:
        self.options = options
        self._is_pinned = is_pinned
        self._cuda = cuda
        self._recorder: Recorder | None = None
        self._window: StepWindow | None = None
        self._stack: ExitStack | None = None
        self._gpu_questions: GpuQuestions | None = None
        self._log: OpLog | None = None
        self._dynamo = DynamoMark()
        self._eager_calls: EagerCalls | None = None
        self._state = "new"
        self._thread: int | None = None
        self._started = 0.0
        self._duration_s: float | None = None
        self._ended_ns: int | None = None
        self.started_at: str | None = None

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def time_origin_ns(self) -> int | None:
        """The ``time.perf_counter_ns()`` that the time view's ``start_ms``/``end_ms`` count
        from (None: no time view), for joining other samples with the steps."""
        clock = self._recorder.step_clock if self._recorder is not None else None
        return None if clock is None else int(clock.start_ns)

    def __enter__(self) -> Profile:
        if self._state != "new":
            raise ProfileStateError(
                "this profile has already run; start a new one with profilers.profile()", "ran"
            )
        with _ENTER_LOCK:
            if registry.ACTIVE is not None:
                raise ProfileStateError(
                    "a profile is already running in this process; profiles cannot be "
                    "nested (leave the outer one first)",
                    "nested",
                )
            recorder = Recorder(
                UserCode(self.options.user_code),
                kernel_timing=self.options.kernel_timing,
                timeline_capacity=self.options.timeline_capacity,
                is_pinned=self._is_pinned,
                cuda=self._cuda,
            )
            registry.ACTIVE = recorder
        self._recorder = recorder
        stack = ExitStack()
        try:
            recorder.trace_syncs = self.options.trace_syncs
            recorder.lib_lines = self.options.lib_lines
            if self.options.trace_syncs:
                _patches.hook_gpu_trace()
            else:
                _patches.patch_explicit_syncs(stack, recorder)
            counting, why = _counting(self.options)
            start_memory(recorder, self.options.memory, counting)
            recorder.counting = counting
            self._dynamo = dynamo_mark(counting)
            self._eager_calls = run_eager(stack, self._dynamo)
            if why:
                warnings.warn(SlowerCounting.of(why), stacklevel=2)
            per_thread: Callable[[], AbstractContextManager[object]] = partial(
                ProfilerMode, recorder
            )
            if counting == "copies":
                kernels = CountingKernels(recorder)
                kernels.install(stack)
                per_thread = kernels.on_thread
            if self.options.threads:
                _patches.patch_threads(stack, recorder, per_thread)
            if self.options.comm:
                _patches.patch_comm(stack, recorder)
            _patches.patch_backward(stack, recorder)
            _patches.patch_work_wait(stack, recorder)
            self._gpu_questions = GpuQuestions(recorder)
            self._gpu_questions.install(stack)
            per_thread_kernel_flag(stack)
            timed = self.options.time_steps > 0 and self.options.steps is None
            timed = timed and time_view_on(self.options.gpu)
            named = resolve_inputs(self.options.inputs)  # InputNotFound before any change
            # NB: the DataLoader's always (its batches are the origin of their copies); the
            # named inputs only where their waits are timed
            patch_input(stack, recorder, _patches.set_attr, named if timed else ())
            # What this thread runs inside while it counts: the mode, or the fast path's key.
            counts = per_thread()
            if timed:
                recorder.step_clock = start_clock(
                    recorder, self.options.time_steps, per_thread if counting == "copies" else None
                )
                sample_gaps(stack, recorder.step_clock, recorder.user)  # their lines named
                self._log = start_log(
                    stack, recorder, recorder.step_clock, self.options.gpu, self.options.what_if
                )
                if self.options.gpu is None and simulated_gpus() is None:
                    start_gpu_time(recorder, recorder.step_clock)  # the GPU half, measured
            quiet = counting == "every_op" and timed and not self.options.count_ops
            if quiet and not self.options.memory and not self.options.trace_syncs:
                recorder.input_scope = _patches.quiet_inputs(stack, recorder, counts)
            if self.options.steps is None:
                _patches.count_steps(stack, recorder)
                stack.enter_context(counts)
            else:
                a, b = self.options.steps
                self._window = StepWindow(recorder, counts, a, b)
                _patches.count_steps(stack, recorder, self._window.on_step)
                stack.callback(self._window.leave)
        except BaseException:
            stack.close()
            registry.ACTIVE = None
            raise
        self._stack = stack
        self._state = "running"
        self._thread = threading.get_ident()
        self._started = time.perf_counter()
        self.started_at = _dt.datetime.now(_dt.UTC).astimezone().isoformat()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread != threading.get_ident():
            raise ProfileStateError(
                "a profile must be left on the thread that entered it", "thread"
            )
        recorder = self._recorder
        assert recorder is not None and self._stack is not None
        self._ended_ns = time.perf_counter_ns()
        if len(exc) > 1 and isinstance(exc[1], BaseException):  # explained though no op raised it
            escaped(exc[1], recorder)
        try:
            self._stack.close()
        finally:
            recorder.active = False
            recorder.forget_frames()
            registry.ACTIVE = None
            self._duration_s = time.perf_counter() - self._started
            self._state = "done"
            if recorder.cuda_timing:
                recorder.resolve(wait=True)  # the profiler's one wait on the GPU

    # -- results --------------------------------------------------------------------------------

    def _recorder_now(self, resolve: bool = False) -> Recorder:
        """The recorder, with the GPU times ready so far read (``resolve``, never waiting)."""
        recorder = self._recorder
        if recorder is None:
            raise ProfileStateError("this profile has not started", "not_started")
        if resolve and recorder.cuda_timing and recorder.active:
            recorder.resolve(wait=False)
        return recorder

    def snapshot(self) -> dict[str, object]:
        """Running totals and lines (``gpuwatch.profile/1`` shape) without stopping or waiting."""
        self._recorder_now(resolve=True)
        return self.report(partial=self.running).to_dict()

    def live_snapshot(self, top: int = 30) -> dict[str, Any]:
        """The run so far for a live display in another process: elapsed seconds, totals,
        devices, the ``top`` busiest lines (no timeline); cheap, never waits for the GPU."""
        recorder = self._recorder_now(resolve=True)
        lines = recorder.merged_lines()
        lines.sort(key=_BUSIEST, reverse=True)
        return {
            "elapsed_s": round(time.perf_counter() - self._started, 3),
            "totals": totals_of(lines).counters_dict(),
            "devices": describe_devices(recorder.devices, recorder.memory),
            "lines": [Line.of(s).to_dict(top_ops=3) for s in lines[:top]],
            "line_count": len(lines),
            "events_recorded": recorder.events_recorded,
            "counting": recorder.counting,
            "time": last_step(recorder.step_clock),
            "memory": live_memory(recorder),
        }

    def report(
        self, command: Sequence[str] = (), exit_code: int = 0, partial: bool | None = None
    ) -> Report:
        """The report of the run (or, while it runs, of the run so far)."""
        recorder = self._recorder_now()
        lines = recorder.merged_lines()
        lines.sort(key=_BUSIEST, reverse=True)
        events = list(recorder.timeline)
        duration = (
            self._duration_s
            if self._duration_s is not None
            else time.perf_counter() - self._started
        )
        devices = describe_devices(recorder.devices, recorder.memory)
        now = self._ended_ns if self._ended_ns is not None else time.perf_counter_ns()
        time_view, predicted, what_if = sections(recorder.step_clock, now, self._log, lines)
        seen = recorder.steps_seen()
        return Report(
            command=list(command),
            exit_code=exit_code,
            duration_s=duration,
            devices=devices,
            totals=Totals.of(totals_of(lines)),
            lines=[Line.of(s) for s in lines],
            timeline=Timeline(
                capacity=recorder.timeline_capacity,
                recorded=recorder.events_recorded,
                dropped=recorder.events_recorded - len(events),
                events=[
                    dict(zip(_EVENT_KEYS, (round(e[0], 6), *e[1:]), strict=True)) for e in events
                ],
                step_ends=[{"step": n, "t": round(t, 6)} for n, t in list(recorder.step_ends)],
            ),
            partial=self.running if partial is None else partial,
            options=RunOptions(
                profile=self.options,
                kernel_timing_source=_timing_source(recorder),
                counting=recorder.counting,
            ),
            started_at=self.started_at,
            internal_errors={
                op: {"count": e.count, "error": e.error}
                for op, e in list(recorder.internal_errors.items())
            },
            steps=seen if self._window is None else window_steps(self._window, seen),
            gpu_fallback=self._gpu_questions.fallback(devices)
            if self._gpu_questions is not None
            else None,
            time=typed(TimeView, time_view),
            memory=typed(MemoryView, memory_section(recorder)),
            predicted=typed(Predicted, predicted),
            what_if=typed(WhatIf, what_if),
            compiled=typed(
                Compiled,
                compiled_section(
                    self._dynamo, recorder.user, recorder.user.display, self._eager_calls
                ),
            ),
        )


def step() -> None:
    """Marks the end of a step (for loops with no optimizer: inference, evaluation); with an
    optimizer, each ``optimizer.step()`` already ends one. Does nothing outside a profile."""
    recorder = registry.ACTIVE
    if recorder is not None and (recorder.active or recorder.on_step is not None):
        recorder.step("manual")


def _counting(options: Options) -> tuple[str, str | None]:
    """``("copies", None)``: the fast path; ``("every_op", lacking)``: the dispatch mode, with
    the hooks this torch lacks when the fast path was wanted but cannot run."""
    if options.count_ops or options.kernel_timing or options.memory:
        return "every_op", None
    if options.count_ops is None and options.trace_syncs:
        return "every_op", None  # a sync the trace reports inside any op needs every op
    lacking = _kernels.missing()
    if lacking:
        return "every_op", str(lacking)
    return "copies", None


def _timing_source(recorder: Recorder) -> str:
    if not recorder.kernel_timing:
        return "off"
    return "cuda_events" if recorder.cuda_timing else "host"


def profile(
    *,
    kernel_timing: bool = True,
    user_code: Sequence[str] | None = None,
    timeline_capacity: int = 10_000,
    threads: bool = True,
    comm: bool = True,
    trace_syncs: bool = False,
    count_ops: bool | None = None,
    is_pinned: IsPinned | None = None,
    cuda: CudaApi | None = None,
    steps: tuple[int, int | None] | None = None,
    time_steps: int = 64,
    memory: bool | None = None,
    gpu: str | None = None,
    inputs: Sequence[str] = (),
    lib_lines: bool = False,
    what_if: bool = False,
) -> Profile:
    """Count copies, syncs and kernel time of the code run inside ``with profile() as prof:``.

    Args:
        kernel_timing: time every op (CUDA events on the op's stream, read back lazily; host time
            for CPU tensors). Off: only counts.
        user_code: directories whose files are "user code" for attribution; by default every
            file outside the standard library, site-packages, torch, gpuwatch and profilers.
        timeline_capacity: newest copy/sync events kept for the timeline (older ones are counted
            in ``timeline["dropped"]``).
        threads: give threads started while profiling their own mode.
        comm: count ``torch.nn.parallel.comm`` copies (DataParallel).
        trace_syncs: take syncs from PyTorch's GPU trace callbacks: also those inside ops no rule
            explains (cause ``other``) and those made from C++, but every CUDA event and
            allocation then calls into Python, for the rest of the process. Off (the default):
            explicit ``synchronize()`` calls and printed GPU tensors are caught where Python
            calls them, at no per-op cost.
        count_ops: count every op per line (the dispatch mode) even without kernel timing. By
            default only timing does: without it, only the ops that copy, sync or communicate
            reach Python (several times cheaper) and the report has no op counts
            (``options["counting"] == "copies"``).
        is_pinned: how to tell pinned host memory (tests pass one for fake tensors).
        cuda: the CUDA calls kernel timing makes (tests pass stand-ins); by default the real
            ones when a GPU is there.
        steps: ``(A, B)``: profile steps A to B-1 only (B None: to the end), a step ended by
            each ``optimizer.step()`` or ``profilers.step()`` on this thread; outside them the
            dispatch mode is off the stack and the code runs at full speed.
        time_steps: where each step's time goes (``report.time``): the newest steps kept in
            full; 0: not measured (nor with ``steps``).
        memory: which line made each tensor, holds which GPU bytes (None: on fake GPUs).
        gpu: under ``--fake-cuda``, the GPU (a name, e.g. ``"H100"``) whose times a model
            predicts: the time view's GPU half and the what-ifs, marked predicted.
        inputs: input iterators besides the DataLoader, by dotted name (a class: its
            ``__next__``, or its ``__iter__``'s iterators; a function: its results), each
            item's wait charged to the line that pulls it; ``profilers.input(it)`` marks one in
            the script. Raises :class:`InputNotFound` for a name that times nothing.
        lib_lines: charge each copy and sync a library made (HF's Trainer, Lightning,
            GradScaler) to the library's line, with the user's lines as its callers, rather
            than to the user's line that called into the library (``Line.library``).
        what_if: on a GPU, record each op for a replay of the steps: ``report.what_if``,
            every fix's saving per step, replayed (``gpu`` always does). Off, the hot path
            keeps no record and the report has no ``what_if``.

    A profile runs once; profiles cannot be nested. Leaving the block, also by an exception,
    restores every patch and the dispatch mode.
    """
    opts = Options(
        kernel_timing=kernel_timing,
        user_code=tuple(user_code) if user_code else None,
        timeline_capacity=timeline_capacity,
        threads=threads,
        comm=comm,
        trace_syncs=trace_syncs,
        steps=steps,
        count_ops=count_ops,
        time_steps=time_steps,
        memory=memory,
        gpu=gpu,
        inputs=tuple(inputs),
        lib_lines=lib_lines,
        what_if=what_if,
    )
    return Profile(opts, is_pinned=is_pinned, cuda=cuda)
