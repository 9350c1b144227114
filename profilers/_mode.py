"""The TorchDispatchMode: skip metadata, hand every other op to the recorder."""

from __future__ import annotations

import sys
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from profilers._ops import METADATA_OPS
from profilers._recorder import Recorder


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

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        recorder = self.recorder
        if func in METADATA_OPS or not recorder.active:
            return func(*args, **kwargs)
        try:
            frame = sys._getframe(1)
        except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
            frame = None
        return recorder.run(func, args, kwargs, frame)
