"""A script that asked for a GPU and got none ran on the CPU: its report counts nothing a GPU run
would ("No hints"), which a laptop user could read as "clean". So on a torch that sees no GPU (a
fake one counts as seen), the first "no GPU" answer to a script's device question is kept with
its line, for the report to say so."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from types import FrameType

import torch

from profilers.counting.recorder import Recorder
from profilers.patches import set_attr

#: (module, function, how the report names it): what scripts ask before choosing a device.
QUESTIONS = (
    ("torch.cuda", "is_available", "torch.cuda.is_available()"),
    ("torch.cuda", "device_count", "torch.cuda.device_count()"),
    ("torch.accelerator", "is_available", "torch.accelerator.is_available()"),
    ("torch.accelerator", "device_count", "torch.accelerator.device_count()"),
)


COMPILERS = tuple(os.sep + os.path.join("torch", part, "") for part in ("_inductor", "_dynamo"))
"""torch.compile's own code: inductor asks ``torch.cuda.is_available()`` while it compiles
under the user's call of a compiled model, which is no question of the script's."""


class GpuQuestions:
    """The first question a user line asked about GPUs that was answered "none"."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.asked: dict[str, object] | None = None

    def install(self, stack: ExitStack) -> None:
        """Watches the questions, only where torch really sees no GPU."""
        if torch.cuda.is_available():
            return
        for module_name, name, shown in QUESTIONS:
            module = sys.modules.get(module_name)
            original = getattr(module, name, None)
            if module is None or original is None:
                continue
            set_attr(stack, module, name, self._watch(original, shown))

    def _watch(self, original: Callable[..., object], shown: str) -> Callable[..., object]:
        def asked(*args: object, **kwargs: object) -> object:
            answer = original(*args, **kwargs)
            if self.asked is None and not answer:
                self._keep(shown, answer, sys._getframe(1))
            return answer

        asked.__wrapped__ = original  # type: ignore[attr-defined]
        asked.__doc__ = original.__doc__
        return asked

    def _keep(self, shown: str, answer: object, frame: FrameType | None) -> None:
        user = self.recorder.user
        f = user.first(frame)
        if f is None:  # torch or a library asked, not the script
            return
        # NB: a compiler's own question is not the script's
        while frame is not None and frame is not f:
            if any(part in frame.f_code.co_filename for part in COMPILERS):
                return
            frame = frame.f_back
        self.asked = {
            "asked": shown,
            "answer": answer,
            "file": user.display(f.f_code.co_filename),
            "line": f.f_lineno,
        }

    def fallback(self, devices: Sequence[Mapping[str, object]]) -> dict[str, object] | None:
        """What the report says (``gpu_fallback``): the question, its answer and its line, when
        the script asked and then ran no op on a GPU; else None."""
        if self.asked is None:
            return None
        if any(not str(d.get("device", "cpu")).startswith("cpu") for d in devices):
            return None
        return dict(self.asked)
