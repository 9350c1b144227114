"""Everything the profiler changes outside its mode (threads, ``comm``, backward, explicit syncs,
optimizer steps), each through profilers/registry.py and listed with why in
profilers/patch_list.py; a DataLoader's ``__next__`` is profilers/timing/inputs.py's.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import ParamSpec, TypeVar

import torch

from profilers import registry
from profilers.counting.mode import ProfilerMode
from profilers.counting.ops import Args, Kwargs, Transfer, direction
from profilers.counting.printing import counted_str
from profilers.counting.recorder import Recorder
from profilers.errors import MissingTorchApi
from profilers.names import SYNCHRONIZE
from profilers.registry import is_own, patcher, switch
from profilers.timing.timeline import COMM, LAUNCH, SYNC
from profilers.torch_private import (
    ENGINE_RUN_BACKWARD,
    THREAD_BOOTSTRAP,
    activate_gpu_trace,
    current_dispatch_mode,
    engine_run_backward,
    gpu_trace,
    only_lift_cpu_tensors,
    pop_mode_temporarily,
    set_only_lift_cpu_tensors,
    tensor_str,
)

P = ParamSpec("P")  # a wrapped function's parameters
R = TypeVar("R")  # and its result
set_attr = patcher("profiler")
"""``owner.name = value`` until the stack closes, on the registry's stack (profilers/registry.py)."""


# -- threads ------------------------------------------------------------------------------------


def patch_threads(
    stack: ExitStack,
    recorder: Recorder,
    per_thread: Callable[[], AbstractContextManager[object]] | None = None,
) -> None:
    """Threads started while profiling run inside ``per_thread()`` (default: their own mode)."""
    enter = per_thread or functools.partial(ProfilerMode, recorder)
    original = getattr(threading.Thread, THREAD_BOOTSTRAP, None)
    if original is None:
        return  # a Python without it: threads the script starts go unprofiled (MISSING says so)

    # NB: _bootstrap_inner runs every thread's run(), subclasses' overrides included; wrapping it
    # (rather than Thread.run) is what reaches DataParallel's parallel_apply workers.
    def _bootstrap_inner(thread: threading.Thread) -> None:
        if recorder.active and not is_own(thread):
            try:
                with enter():
                    original(thread)
            finally:
                recorder.release_state()
        else:
            original(thread)

    set_attr(stack, threading.Thread, THREAD_BOOTSTRAP, _bootstrap_inner)


# -- backward -----------------------------------------------------------------------------------


def patch_backward(stack: ExitStack, recorder: Recorder) -> None:
    """The line of each backward (``loss.backward()``, ``torch.autograd.grad``), kept while it
    runs: autograd's device threads run its ops with no user frame.

    NB: torch's private ``torch.autograd._engine_run_backward``, which both call, is wrapped,
    not the public functions: TorchScript maps ``torch.autograd.grad`` to an op by identity
    (torch/jit/_builtins.py), and users and libraries compare and pickle them."""
    engine = engine_run_backward
    if engine is None:
        return

    @functools.wraps(engine)
    def run_backward(*args: object, **kwargs: object) -> object:
        if recorder.backward_line is not None or not recorder.active:
            return engine(*args, **kwargs)
        t0 = time.perf_counter_ns()
        try:
            recorder.backward_state = recorder.state()
            line = recorder.backward_line = recorder.line_for(sys._getframe(1))
            _own(recorder, line, t0)
        except Exception as exc:  # never into user code: the backward runs uncharged
            recorder.internal_error("backward", exc)
            recorder.backward_line = recorder.backward_state = None
            return engine(*args, **kwargs)
        try:
            return engine(*args, **kwargs)
        finally:
            t0 = time.perf_counter_ns()
            recorder.backward_line = None
            recorder.backward_state = None
            recorder.forget_nodes()
            _own(recorder, line, t0)

    set_attr(stack, torch.autograd, ENGINE_RUN_BACKWARD, run_backward)


def _own(recorder: Recorder, line: object, t0: int) -> None:
    """The profiler's own work since ``t0``, outside any op (a backward's start and end, once a
    step: 5-20 us), taken out of the step as the hot path's own time is."""
    clock = recorder.clock_here()
    if clock is not None:
        clock.wait(line, LAUNCH, None, t0, t0, t0, time.perf_counter_ns())


# -- torch.tensor(data, device="cuda") ---------------------------------------------------------


def lift_on_the_host(stack: ExitStack) -> None:
    """``torch.tensor(data, device="cuda")`` copies its data to the GPU inside the call, with
    dispatch modes excluded: a blocking copy no mode sees. With this switch (the one
    FakeTensorMode sets) the tensor is made on the host and moved by a ``_to_copy`` after it,
    so the copy is counted; the result is the same tensor. For the whole of a block (the fake
    GPU). The profiler counts the copy from the ``lift_fresh`` after it instead
    (counting/ops.py): with the switch on for a whole run, every op of a training step costs
    the profiler about half as much again."""
    if only_lift_cpu_tensors is None or set_only_lift_cpu_tensors is None:
        return
    if only_lift_cpu_tensors():
        return
    set_only_lift_cpu_tensors(True)
    undo = functools.partial(set_only_lift_cpu_tensors, False)
    switch("fake_cuda", stack, "torch._C._set_only_lift_cpu_tensors(True)", undo)


# -- input waits ---------------------------------------------------------------------------------


def quiet_inputs(
    stack: ExitStack, recorder: Recorder, mode: object
) -> Callable[[], AbstractContextManager[None]] | None:
    """What an input wait on the profile's thread runs inside (timing/inputs.py): the fast
    path's key in place of the mode ``mode``, so the loader's own ops (the dataset's indexing
    and collate's stack: about 130 a batch of 64 rows, 4 us each through the mode, 3-4x the
    loader's own time) run at full speed while their copies and syncs are still counted, and
    the wait is the loader's. The fast path's kernels are installed at the first wait. None
    where this torch lacks the fast path; a wait with a mode of the script's above ours keeps
    the mode (its cost then measured and taken out)."""
    from profilers.counting.kernels import CountingKernels, missing

    if missing() is not None or current_dispatch_mode is None or pop_mode_temporarily is None:
        return None
    kernels: list[CountingKernels] = []

    @contextmanager
    def scope() -> Iterator[None]:
        if current_dispatch_mode() is not mode:
            yield
            return
        if not kernels:
            kernels.append(CountingKernels(recorder))
            kernels[0].install(stack)
        with pop_mode_temporarily(), kernels[0].on_thread():
            yield

    return scope


# -- steps --------------------------------------------------------------------------------------


def count_steps(
    stack: ExitStack, recorder: Recorder, on_step: Callable[[], None] | None = None
) -> None:
    """One iteration of the training loop is one step, however many optimizers step in it.
    An ``optimizer.step()`` of any torch optimizer (a global post-hook, removed when the profile
    ends) ends a step, unless another optimizer stepped in this step and no DataLoader batch
    was pulled since: then it joins that step (a GAN's D then G, two optimizers over one model's
    parameters, an optimizer that steps another). So a single optimizer, gradient accumulation
    (one ``step()`` per k batches) and an LR scheduler (not an optimizer) end one step per
    ``step()``, and optimizers stepped in alternate iterations one per batch. NB: with no
    DataLoader, optimizers stepped in turn (D, G, D, G) read as one GAN iteration per pair.
    ``on_step`` runs after each step (a step window)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    recorder.on_step = on_step
    stepped: set[int] = set()  # the optimizers that stepped in this step
    batches = -1  # the loader's batches pulled when this step ended

    def after_step(optimizer: object, args: object, kwargs: object) -> None:
        nonlocal batches
        if id(optimizer) not in stepped and batches == recorder.batches:
            stepped.add(id(optimizer))  # another optimizer of the same iteration
            return
        stepped.clear()
        stepped.add(id(optimizer))
        batches = recorder.batches
        if recorder.active or on_step is not None:
            recorder.step("optimizer")

    handle = register_optimizer_step_post_hook(after_step)
    switch("profiler", stack, "torch.optim optimizer step post-hook", handle.remove)


# -- collectives: work.wait() ---------------------------------------------------------------------


def patch_work_wait(stack: ExitStack, recorder: Recorder) -> None:
    """``work.wait()`` on an async collective is a host wait the dispatcher never sees: its
    time goes to the line that called it (``comm.wait_ms``)."""
    work = getattr(getattr(torch, "distributed", None), "Work", None)
    if work is None or not hasattr(work, "wait"):
        return
    original = work.wait

    @functools.wraps(original)
    def wait(self: object, *args: object, **kwargs: object) -> object:
        if not recorder.active:
            return original(self, *args, **kwargs)
        t = time.perf_counter_ns()
        try:
            return original(self, *args, **kwargs)
        finally:
            try:
                frame = sys._getframe(1)
                recorder.waited(recorder.line_for(frame), (time.perf_counter_ns() - t) / 1e6)
                recorder.timed_wait(frame, COMM, None, t, t, time.perf_counter_ns())
            except Exception as exc:  # never into user code
                recorder.internal_error("Work.wait", exc)

    set_attr(stack, work, "wait", wait)


# -- torch.nn.parallel.comm ---------------------------------------------------------------------

Pairs = Iterator[tuple[torch.Tensor, torch.Tensor, int]]
"""(source, destination, bytes) of each copy a comm function made."""
CommCounter = Callable[[Args, Kwargs, object], Pairs]


def _arg(args: Args, kwargs: Kwargs, i: int, name: str) -> object:
    return args[i] if len(args) > i else kwargs.get(name)


def _tensors(value: object) -> list[torch.Tensor]:
    """A comm function's argument or result as tensors: a tensor, or a list or tuple of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value if isinstance(value, (list, tuple)) else ()
    return [t for t in items if isinstance(t, torch.Tensor)]


def _groups(value: object) -> list[list[torch.Tensor]]:
    return [_tensors(v) for v in value] if isinstance(value, (list, tuple)) else []


def _broadcast(args: Args, kwargs: Kwargs, out: object, whole: bool = True) -> Pairs:
    for src in _tensors(_arg(args, kwargs, 0, "tensor")):
        for copy in _tensors(out):
            if copy.device != src.device:
                yield src, copy, (src if whole else copy).nbytes  # scatter: a chunk each


def _broadcast_coalesced(args: Args, kwargs: Kwargs, out: object) -> Pairs:
    tensors = _tensors(_arg(args, kwargs, 0, "tensors"))
    if not tensors:
        return
    nbytes = sum(t.nbytes for t in tensors)
    for per_device in _groups(out):
        if per_device and per_device[0].device != tensors[0].device:
            yield tensors[0], per_device[0], nbytes  # one coalesced transfer per device


def _reduce_add(args: Args, kwargs: Kwargs, out: object, name: str = "inputs") -> Pairs:
    for dst in _tensors(out):
        for t in _tensors(_arg(args, kwargs, 0, name)):
            if t.device != dst.device:
                yield t, dst, t.nbytes


def _reduce_add_coalesced(args: Args, kwargs: Kwargs, out: object) -> Pairs:
    outs = _tensors(out)
    for group in _groups(_arg(args, kwargs, 0, "inputs")) if outs else ():
        if group and group[0].device != outs[0].device:
            yield group[0], outs[0], sum(t.nbytes for t in group)


COMM_COUNTERS: dict[str, CommCounter] = {
    "broadcast": _broadcast,
    "broadcast_coalesced": _broadcast_coalesced,
    "reduce_add": _reduce_add,
    "reduce_add_coalesced": _reduce_add_coalesced,
    "scatter": functools.partial(_broadcast, whole=False),
    "gather": functools.partial(_reduce_add, name="tensors"),  # the same copies, named so
}


def wrap_comm(name: str, fn: Callable[P, R], recorder: Recorder) -> Callable[P, R]:
    """``fn`` (a comm function) counting its copies; ops it dispatches inside are not re-counted."""
    count = COMM_COUNTERS[name]

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        st = recorder.state()
        if st.in_comm or not recorder.active:
            return fn(*args, **kwargs)
        st.in_comm += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            st.in_comm -= 1
        try:
            caller = sys._getframe(1)
            line = recorder.line_for(caller)
            for src, dst, nbytes in count(args, kwargs, out):
                way = direction(src.device, dst.device)
                if way is not None:
                    pageable = way == "h2d" and not recorder.is_pinned(src)
                    recorder.apply(
                        line,
                        Transfer(
                            way, nbytes, pageable, True, None, str(src.device), str(dst.device)
                        ),
                        frame=caller,
                    )
        except Exception as exc:  # never into user code: the result is returned uncounted
            recorder.internal_error(f"comm.{name}", exc)
        return out

    return wrapper


def patch_comm(stack: ExitStack, recorder: Recorder) -> None:
    import torch.cuda.comm
    import torch.nn.parallel.comm

    for module in (torch.nn.parallel.comm, torch.cuda.comm):
        for name in COMM_COUNTERS:
            fn = getattr(module, name, None)
            if fn is not None:
                set_attr(stack, module, name, wrap_comm(name, fn, recorder))


# -- explicit syncs -----------------------------------------------------------------------------


def patch_explicit_syncs(stack: ExitStack, recorder: Recorder) -> None:
    """Catches the syncs the dispatcher never sees at their Python entry points, at no per-op
    cost: ``torch.cuda.synchronize()``, ``Stream.synchronize()``, ``Event.synchronize()``, and
    what printing a GPU tensor (``repr``/``str``/``print``) reads, which torch does with every
    mode disabled (profilers/counting/printing.py)."""

    def wrap(fn: Callable[P, R], cause: str) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            enter, clock, line = time.perf_counter_ns(), None, None
            try:
                if recorder.active and not recorder.own_sync:
                    caller = sys._getframe(1)
                    line = recorder.line_for(caller)
                    recorder.apply(line, Transfer(None, sync=cause), frame=caller)
                    clock = recorder.clock_here()
            except Exception as exc:  # never into user code: the call goes ahead uncounted
                recorder.internal_error(fn.__qualname__, exc)
            if clock is None:
                return fn(*args, **kwargs)
            start = time.perf_counter_ns()  # the time blocked goes to the line, as the sync's
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter_ns()
                clock.wait(line, SYNC, cause, enter, start, end, time.perf_counter_ns())
                clock.line(line).syncs += 1

        return wrapper

    for owner in (torch.cuda, torch.cuda.Stream, torch.cuda.Event):
        set_attr(stack, owner, "synchronize", wrap(owner.synchronize, SYNCHRONIZE))
    if tensor_str is not None and hasattr(tensor_str, "_str"):
        set_attr(stack, tensor_str, "_str", counted_str(tensor_str._str, lambda: recorder.active))


# -- GPU trace ----------------------------------------------------------------------------------

_HOOKED = False
_HOOK_LOCK = threading.Lock()


def _forward(kind: str) -> Callable[..., None]:
    def callback(*_args: object) -> None:
        recorder = registry.ACTIVE
        if recorder is not None:
            recorder.on_trace_sync(kind, sys._getframe(1))

    return callback


def hook_gpu_trace() -> None:
    """Registers the sync callbacks once per process (torch offers no way to remove them); they
    forward to the running profile, if any. Tracing is switched on only where CUDA exists.

    NB: opt-in (``trace_syncs=True``). Once on, PyTorch keeps the GPU trace on for the life of
    the process (c10::impl::GPUTrace is set once), and every CUDA event record, allocation and
    sync then calls into Python, a cost per op on a GPU. What it adds over the default: syncs
    inside ops that no rule explains (cause ``other``) and syncs made from C++ code."""
    global _HOOKED
    with _HOOK_LOCK:
        if _HOOKED:
            return
        if gpu_trace is None or activate_gpu_trace is None:
            raise MissingTorchApi("trace_syncs", "torch.cuda._gpu_trace")
        gpu_trace.register_callback_for_device_synchronization(_forward("device"))
        gpu_trace.register_callback_for_stream_synchronization(_forward("stream"))
        gpu_trace.register_callback_for_event_synchronization(_forward("event"))
        if torch.cuda.is_available():
            activate_gpu_trace()
        _HOOKED = True
