"""The TorchDispatchMode: every op goes to the recorder, which skips metadata and charges the rest."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from profilers._recorder import Recorder, dispatch


class ProfilerMode(TorchDispatchMode):
    """One instance per thread that runs ops (dispatch modes are thread-local)."""

    # NB: False (the default) on purpose: under this mode torch.compile'd code runs eagerly, so
    # every copy and sync inside compiled regions is still seen. Kernel time then reflects eager
    # execution; the README says so.
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return False

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    # The hot path lives beside the recorder's state; assigned, not wrapped, to save a call.
    __torch_dispatch__ = dispatch
