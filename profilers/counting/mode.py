"""The TorchDispatchMode: every op goes to the recorder, which skips metadata and charges the rest."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from profilers.counting.dispatch import _under_compile, dispatch
from profilers.counting.recorder import Recorder
from profilers.torch_private import eval_frame, set_code_exec_strategy


def hide_from_dynamo() -> bool:
    """Marks dispatch() for dynamo to skip; False where this torch cannot, and then torch's own
    wrapper around __torch_dispatch__ stays (see ``ProfilerMode._should_skip_dynamo``)."""
    mark = set_code_exec_strategy
    if mark is None or eval_frame is None:
        return False
    skip = eval_frame._FrameExecStrategy(
        eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT
    )
    mark(dispatch.__code__, skip)
    mark(_under_compile.__code__, skip)
    return True


class ProfilerMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's, untyped
    """One instance per thread that runs ops (dispatch modes are thread-local)."""

    gpuwatch_kept_on_print = True
    """On while a GPU tensor prints, to count what the print reads (profilers/counting/printing.py)."""

    # NB: False (the default) on purpose: under this mode torch.compile'd code runs eagerly, so
    # every copy and sync inside compiled regions is still seen. Kernel time then reflects eager
    # execution; the report says so (profilers/compiled.py: report.compiled.ran_eager).
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return False

    # NB: torch wraps every mode's __torch_dispatch__ in torch._disable_dynamo so that
    # torch.compile never traces into it: two Python frames and four calls per op, about 0.6 us
    # (a sixth of a bare mode's cost). dispatch() does the same job itself with one C call (the
    # eval-frame callback is cleared while it runs and restored after) and its code is marked for
    # dynamo to skip; where this torch lacks those hooks, torch's own wrapper stays.
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return not hide_from_dynamo()

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder

    # The hot path lives beside the recorder's state; assigned, not wrapped, to save a call.
    __torch_dispatch__ = dispatch
