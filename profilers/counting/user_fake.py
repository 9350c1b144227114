"""A script's own ``FakeTensorMode`` across threads, while a profile runs.

NB: FakeTensorMode keeps "inside a kernel" as one attribute of the mode
(``in_kernel_invocation``, torch/_subclasses/fake_tensor.py), shared by every thread. While one
thread runs a fake op, another thread's op on the same mode's tensors sees the flag set: its
``FakeTensor.device`` answers ``meta`` and FakeTensorMode's own dispatch fails with
"fake_mode.in_kernel_invocation must be False". A training loop that hands losses to a logger
thread lost some of the logger's ``.item()`` syncs so in about 3 runs of 7. While profiling, the
flag is kept per thread on every FakeTensorMode (gpuwatch's own fake GPU does the same for its
mode, profilers/fake_cuda/mode.py); the class is given back at exit."""

from __future__ import annotations

import threading
from contextlib import ExitStack

_KEY = "_gpuwatch_in_kernel"


def _flags(mode: object) -> threading.local:
    found = mode.__dict__.get(_KEY)
    if found is None:
        # NB: dict.setdefault is atomic under the GIL: two threads get the same local.
        found = mode.__dict__.setdefault(_KEY, threading.local())
    return found  # type: ignore[no-any-return]


def _get(mode: object) -> bool:
    return bool(getattr(_flags(mode), "on", False))


def _set(mode: object, on: bool) -> None:
    _flags(mode).on = on


PER_THREAD_FLAG = property(_get, _set)
"""``in_kernel_invocation`` kept per thread (the fake GPU's own mode has it too)."""


def per_thread_kernel_flag(stack: ExitStack) -> None:
    """Makes ``FakeTensorMode.in_kernel_invocation`` per thread until ``stack`` closes."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:  # a torch without fake tensors: no such mode to fix
        return
    original = FakeTensorMode.__dict__.get("in_kernel_invocation", False)
    if isinstance(original, property):
        return  # already per thread (a profile inside a profile)
    FakeTensorMode.in_kernel_invocation = PER_THREAD_FLAG  # type: ignore[assignment]
    stack.callback(setattr, FakeTensorMode, "in_kernel_invocation", original)
