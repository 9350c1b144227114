"""What the profiler raises and warns, typed, each with its facts as attributes.

A library speaks in its own words (the keywords of :func:`profilers.profile`, the APIs of torch),
never in a command line's: gpuwatch's CLI turns these into one line that names its flags
(gpuwatch/profile/worded.py). Warnings go through :mod:`warnings` with a category of
:class:`ProfilerWarning`, so that a caller can filter, record or show them as it likes.

Needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


class ProfilerError(Exception):
    """Something the profiler itself refuses or cannot do."""


class ProfileStateError(ProfilerError, RuntimeError):
    """A profile used out of turn; ``state`` says how: entered twice (``"ran"``), ``"nested"`` in
    another, read before it started (``"not_started"``), or left on another ``"thread"``."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.state))


class MissingTorchApi(ProfilerError, RuntimeError):
    """An option asked for needs an API this torch does not have.

    Attributes:
        option: the keyword of :func:`profilers.profile` (``"trace_syncs"``).
        api: what torch lacks (``"torch.cuda._gpu_trace"``).
    """

    def __init__(self, option: str, api: str) -> None:
        super().__init__(f"{option}=True needs {api}, which this torch does not have")
        self.option = option
        self.api = api

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.option, self.api))


class FakeCudaUnavailable(ProfilerError, RuntimeError):
    """The fake GPU cannot run here. ``reason`` continues "the fake GPU ..." in one line (``"needs
    a C++ compiler once, ..."``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the fake GPU {reason}")
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.reason,))


class NotSimulated(ProfilerError, AttributeError):
    """A CUDA API the fake GPU does not simulate, raised where the script calls it.

    Attributes:
        api: what the script called (``"torch.cuda.memory.memory_snapshot()"``).
        needs: the private entry point it reached (``"torch._C._cuda_memorySnapshot"``).
    """

    def __init__(self, api: str, needs: str) -> None:
        super().__init__(
            f"the fake GPU does not simulate {api} (it needs {needs}); run it on a GPU"
        )
        self.api = api
        self.needs = needs

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.api, self.needs))


class MeasuredNotPredicted(ProfilerError, RuntimeError):
    """``gpu=NAME`` (a model of a named GPU) on a run whose GPUs are real: they are measured,
    and a prediction beside them would mix measured and predicted figures."""

    def __init__(self, gpu: str) -> None:
        super().__init__(f"gpu={gpu!r} predicts a named GPU on simulated GPUs only")
        self.gpu = gpu

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.gpu,))


class InputNotFound(ProfilerError, ValueError):
    """An input iterator named by its dotted name (``inputs=``) that a profile cannot time.

    Attributes:
        name: the name as given (``"mypkg.data.Batches"``).
        reason: what is wrong, continuing the name (``"names no module that can be imported"``).
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"input {name!r} {reason}")
        self.name = name
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.name, self.reason))


@dataclass(slots=True)
class OpFailure:
    """An op the profiler failed on (the op itself ran: only its copies and syncs are missing): how
    many times, and the first error in one line (the report's ``internal_errors[op]``)."""

    count: int
    error: str


class ProfilerWarning(UserWarning):
    """The category of every warning the profiler gives."""


class SlowerCounting(ProfilerWarning):
    """The fast path (copies and syncs only, ``kernel_timing=False``) cannot run on this torch:
    every op goes through the dispatch mode instead. Same counts, slower. ``lacking``: the
    private hooks this torch does not have.

    NB: made by :meth:`of`; the constructor takes the message alone, as every warning's does
    (``warnings`` and pytest build a warning again from its text)."""

    def __init__(self, message: str, lacking: str = "") -> None:
        super().__init__(message)
        self.lacking = lacking

    @classmethod
    def of(cls, lacking: str) -> SlowerCounting:
        return cls(
            f"this torch lacks {lacking}; counting through the dispatch mode instead "
            "(every op enters Python: slower, same counts)",
            lacking,
        )
