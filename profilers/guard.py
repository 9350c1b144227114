"""``profilers.budget()``: a block of code that must not copy or sync beyond a budget.

    with profilers.no_syncs():              # or profilers.budget(syncs=0, h2d=0)
        train_step(model, batch)            # BudgetExceeded names each line that synced

Unlike ``torch.cuda.set_sync_debug_mode`` (one switch per process), a guard counts only its own
thread, the threads it starts in the block and its backward passes (autograd's device threads
inherit the thread's dispatch modes): two tests guarded on two threads never see each other's.

How: each guard is a recorder of its own with the profiler's dispatch mode on the guarded thread.
What the mode cannot see is caught at its Python entry points by patches shared by every guard
(installed while any guard is on, each routing to the guards of the calling thread): threads
started in the block, ``.backward()`` (whose line autograd's threads charge), explicit
``synchronize()`` calls, printing a GPU tensor, and ``torch.tensor(data, device="cuda")``.
Not counted in a guard (``gpuwatch profile`` counts them): ``nn.parallel.comm`` copies
(DataParallel) and ``work.wait()``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import ContextDecorator, ExitStack

import torch

from profilers.budgets import Breach, Budget, check_report
from profilers.counting.mode import ProfilerMode
from profilers.counting.ops import IsPinned, Transfer
from profilers.counting.recorder import Recorder, totals_of
from profilers.counting.user_code import UserCode
from profilers.names import COPY_TO_HOST, SYNCHRONIZE
from profilers.records import Line, Totals
from profilers.registry import patcher
from profilers.report import Report
from profilers.torch_private import (
    ENGINE_RUN_BACKWARD,
    THREAD_BOOTSTRAP,
    engine_run_backward,
    tensor_str,
)

__all__ = ["BudgetExceeded", "Guard", "budget", "no_syncs"]

_LOCAL = threading.local()
"""``guards``: the guards on for this thread (innermost last)."""


def _guards() -> tuple[Guard, ...]:
    guards: tuple[Guard, ...] = getattr(_LOCAL, "guards", ())
    return guards


class BudgetExceeded(AssertionError):
    """A guarded block went over its budget. The message names every line over it; the
    breaches themselves are in :attr:`breaches`, the block's counts in :attr:`report`.

    An ``AssertionError``, so that test runners report it as a failed test."""

    def __init__(self, message: str, breaches: list[Breach], report: Report) -> None:
        super().__init__(message)
        self.breaches = breaches
        self.report = report


BudgetExceeded.__module__ = "profilers"  # as users name it (profilers.BudgetExceeded)


class Guard(ContextDecorator):
    """One budget over a block; see :func:`budget`. Usable as a decorator too (each call of the
    function is guarded on its own)."""

    def __init__(
        self,
        limits: Budget,
        user_code: Sequence[str] | None = None,
        is_pinned: IsPinned | None = None,
    ) -> None:
        per_step = [str(t) for t in limits.terms if t.per_step]
        if per_step:
            raise ValueError(
                f"{limits.source}: {per_step[0]}: a guarded block is judged as a whole, not per "
                "step (a profile's report is checked per step: profilers.budgets.check_report)"
            )
        self.budget = limits
        self._user_code = tuple(user_code) if user_code else None
        self._is_pinned = is_pinned
        self.recorder: Recorder | None = None
        self._stack: ExitStack | None = None
        self.where = ""
        """What the block is, for the message (by default the ``with`` line)."""
        self._result: Report | None = None
        self.breaches: list[Breach] = []

    def _recreate_cm(self) -> Guard:
        return Guard(self.budget, self._user_code, self._is_pinned)

    @property
    def active(self) -> bool:
        return self.recorder is not None and self.recorder.active

    def __enter__(self) -> Guard:
        if self._stack is not None:
            raise RuntimeError("this budget guard is already on; make one per block")
        user = UserCode(self._user_code)
        if not self.where:
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename == contextlib.__file__:
                frame = frame.f_back
            self.where = f"the block at {user.display(frame.f_code.co_filename)}:{frame.f_lineno}"
        self.recorder = Recorder(
            user, kernel_timing=False, timeline_capacity=0, is_pinned=self._is_pinned
        )
        self._result = None
        self.breaches = []
        stack = ExitStack()
        _SHARED.acquire()
        stack.callback(_SHARED.release)
        previous = _guards()
        _LOCAL.guards = (*previous, self)
        stack.callback(setattr, _LOCAL, "guards", previous)
        try:
            stack.enter_context(ProfilerMode(self.recorder))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        __tracebackhide__ = True  # pytest shows the test's own lines, not the guard's
        recorder, stack = self.recorder, self._stack
        assert recorder is not None and stack is not None
        try:
            stack.close()
        finally:
            recorder.active = False
            recorder.forget_frames()
            self._stack = None
        report = self.report()
        self.breaches = check_report(self.budget, report)
        # NB: an exception already leaving the block is the user's to see; the budget's verdict
        # would only hide it.
        if self.breaches and kind is None:
            lines = [b for breach in self.breaches for b in breach.text()]
            raise BudgetExceeded(
                f"over budget ({self.budget}) in {self.where}:\n" + "\n".join(lines),
                self.breaches,
                report,
            )

    def report(self) -> Report:
        """What the block counted (so far, while it runs): its lines and totals."""
        if self.recorder is None:
            raise RuntimeError("this budget guard has not been entered")
        if self._result is not None:
            return self._result
        lines = self.recorder.merged_lines()
        lines.sort(key=lambda s: (s.syncs.count, s.bytes_moved, s.ops), reverse=True)
        report = Report(lines=[Line.of(s) for s in lines], totals=Totals.of(totals_of(lines)))
        if not self.active:
            self._result = report
        return report


def budget(
    spec: str | None = None,
    /,
    *,
    user_code: Sequence[str] | None = None,
    is_pinned: IsPinned | None = None,
    **limits: float,
) -> Guard:
    """A guard: the block inside ``with`` may copy, sync and communicate at most so much.

    Args:
        spec: a budget as ``gpuwatch profile --budget`` reads it (``"syncs<=0,h2d.pageable=0"``;
            ``line:`` for a ceiling each line must keep); no ``/step``: a block is judged whole.
        user_code: directories whose files are yours, for naming lines (as in ``profile()``).
        is_pinned: how to tell pinned host memory (tests of fake tensors pass one).
        **limits: ceilings by measure, dots spelled ``_``: ``syncs=0``, ``h2d=0``,
            ``syncs_item=0``, ``h2d_pageable=0``, ``bytes=1_000_000``, ``comm=2``.

    Counts the calling thread, the threads it starts in the block and the backward passes it
    runs, never other threads. On leaving the block over budget it raises
    :class:`BudgetExceeded`, naming every line that spent it (unless the block raised first).
    Under ``profilers.fake_cuda.harness`` enter the fake GPU first, then the guard.
    """
    return Guard(Budget.from_kwargs(spec, limits, "budget"), user_code, is_pinned)


def no_syncs(*, user_code: Sequence[str] | None = None) -> Guard:
    """``budget(syncs=0)``: the block must never make the host wait for the GPU."""
    return budget(user_code=user_code, syncs=0)


# -- what the mode cannot see, routed to the calling thread's guards ------------------------------


# NB: a profile or the fake GPU may patch over a guard's patches and leave after it: the
# registry's one stack puts back what was there before either, whatever the order.
_set = patcher("guard")


def _each_recorder(use: Callable[[Recorder], None], what: str) -> None:
    for guard in _guards():
        recorder = guard.recorder
        if recorder is not None and recorder.active:
            try:
                use(recorder)
            except Exception as exc:  # never into user code: the call goes ahead uncounted
                recorder.internal_error(what, exc)


def _patch_threads(stack: ExitStack) -> None:
    start = threading.Thread.start
    bootstrap = getattr(threading.Thread, THREAD_BOOTSTRAP, None)
    if bootstrap is None:
        return  # a Python without it: threads started in a guard go uncounted

    @functools.wraps(start)
    def guarded_start(thread: threading.Thread) -> None:
        guards = _guards()
        if guards:
            thread.__dict__["_gpuwatch_guards"] = guards
        start(thread)

    def guarded_bootstrap(thread: threading.Thread) -> None:
        guards = [g for g in thread.__dict__.pop("_gpuwatch_guards", ()) if g.active]
        if not guards:
            bootstrap(thread)
            return
        with ExitStack() as inner:
            _LOCAL.guards = tuple(guards)
            for g in guards:
                assert g.recorder is not None
                inner.callback(g.recorder.release_state)
                inner.enter_context(ProfilerMode(g.recorder))
            bootstrap(thread)

    _set(stack, threading.Thread, "start", guarded_start)
    _set(stack, threading.Thread, THREAD_BOOTSTRAP, guarded_bootstrap)


def _patch_backward(stack: ExitStack) -> None:
    """As the profiler's (profilers/patches.py): torch's private backward entry, wrapped."""
    engine = engine_run_backward
    if engine is None:
        return

    @functools.wraps(engine)
    def run_backward(*args: object, **kwargs: object) -> object:
        caller = sys._getframe(1)
        began: list[Recorder] = []

        def begin(recorder: Recorder) -> None:
            if recorder.backward_line is None:
                recorder.backward_state = recorder.state()
                recorder.backward_line = recorder.line_for(caller)
                began.append(recorder)

        _each_recorder(begin, "backward")
        try:
            return engine(*args, **kwargs)
        finally:
            for recorder in began:
                recorder.backward_line = recorder.backward_state = None
                recorder.forget_nodes()

    _set(stack, torch.autograd, ENGINE_RUN_BACKWARD, run_backward)


def _on_device(args: tuple[object, ...]) -> bool:
    t = args[0] if args else None
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def _patch_syncs(stack: ExitStack) -> None:
    def wrap(
        owner: object,
        name: str,
        cause: str,
        applies: Callable[[tuple[object, ...]], bool] | None = None,
    ) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> object:
            if applies is None or applies(args):
                caller = sys._getframe(1)
                _each_recorder(
                    lambda r: r.apply(r.line_for(caller), Transfer(None, sync=cause)),
                    fn.__qualname__,
                )
            return fn(*args, **kwargs)

        _set(stack, owner, name, wrapper)

    wrap(torch.cuda, "synchronize", SYNCHRONIZE)
    wrap(torch.cuda.Stream, "synchronize", SYNCHRONIZE)
    wrap(torch.cuda.Event, "synchronize", SYNCHRONIZE)
    if tensor_str is not None and hasattr(tensor_str, "_str"):
        # NB: printing a GPU tensor copies it to the host with every mode off
        # (torch/_tensor_str.py): no op of it reaches the guard's mode.
        wrap(tensor_str, "_str", COPY_TO_HOST, _on_device)


class _Shared:
    """The patches every guard shares: installed by the first guard on, removed by the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._stack: ExitStack | None = None

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                stack = ExitStack()
                try:
                    _patch_threads(stack)
                    _patch_backward(stack)
                    _patch_syncs(stack)
                except BaseException:
                    stack.close()
                    raise
                self._stack = stack
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._stack is not None:
                self._stack.close()
                self._stack = None


_SHARED = _Shared()
