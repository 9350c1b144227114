"""The hot path's one call when an op raises (``profilers/counting/dispatch.py``): explain a device
mismatch or an out-of-memory error, and hand the error back without the profiler's frames."""

from __future__ import annotations

import os
import sys
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

import torch
from torch._ops import OpOverload

from profilers.memory.explain import explain, explain_grouping
from profilers.memory.gpu_errors import Args, Kwargs

if TYPE_CHECKING:
    from profilers.counting.recorder import Recorder
    from profilers.stats import LineStats

_PROFILERS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FAKE_CUDA = os.path.join(_PROFILERS, "fake_cuda") + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__ or "")) + os.sep


def failed(
    recorder: Recorder,
    line: LineStats | FrameType | None,
    op: str,
    func: OpOverload,
    args: Args,
    kwargs: Kwargs,
    exc: BaseException,
) -> BaseException:
    """Notes what ``exc`` (raised by ``func`` at ``line``) means in ``recorder.failure``, and
    returns it with the frames below the hot path that a GPU run would not have: the profiler's
    own, and, where the fake GPU ran the op, torch's fake-tensor machinery. ``line`` is a frame
    (the op's caller) for the fast path's kernels, which find the op's line only when needed."""
    try:
        if line is None or isinstance(line, FrameType):
            line = recorder.line_for(line)
        found = explain(recorder.memory, line, op, func, args, kwargs, exc)
        if found is not None:
            # the callers of the failing line, innermost first (the frames above this one)
            found["chain"] = recorder.user.chain(recorder.user.first(sys._getframe(1)))
            recorder.failure = found
    except Exception as own:  # NB: the profiler never raises into user code; the error stands
        recorder.internal_error(op, own)
    return exc.with_traceback(user_frames(exc.__traceback__))


def escaped(exc: BaseException, recorder: Recorder) -> None:
    """Explains an error the script let out that no op raised (the optimizer's grouping of its
    tensors by device, ``explain.GROUPING``), into ``recorder.failure`` unless an op's failure
    is there already. Called where the script's error is caught: the profile's exit, the CLI's
    runner (``profilers.session.explain_escaped``)."""
    if recorder.failure is not None:
        return
    try:
        found = explain_grouping(recorder.memory, recorder.user, exc)
        if found is not None:
            recorder.failure = found
    except Exception as own:  # NB: the profiler never raises into user code; the error stands
        recorder.internal_error("optimizer step", own)


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the profiler's frames (and torch's, under the fake GPU's)."""
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    simulated = any(e.tb_frame.f_code.co_filename.startswith(_FAKE_CUDA) for e in entries)
    kept: TracebackType | None = None
    for entry in reversed(entries):
        name = entry.tb_frame.f_code.co_filename
        if name.startswith(_PROFILERS) or (simulated and name.startswith(_TORCH)):
            continue
        kept = TracebackType(kept, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return kept
