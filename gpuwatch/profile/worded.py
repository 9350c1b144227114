"""The profiler library's errors and warnings (profilers/errors.py) in the CLI's words: one line
that names ``gpuwatch profile``'s flags where the library names its keywords."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from gpuwatch.errors import CliError
from gpuwatch.profile.options import ProfileOptions
from profilers.errors import (
    FakeCudaUnavailable,
    InputNotFound,
    MeasuredNotPredicted,
    MissingTorchApi,
    ProfilerError,
    ProfilerWarning,
)


def flag_of(option: str) -> str:
    """The flag of a ``profilers.profile()`` keyword that is also a CLI option
    (``trace_syncs`` -> ``--trace-syncs``); the keyword itself otherwise."""
    for f in dataclasses.fields(ProfileOptions):
        if f.name == option:
            return str(f.metadata["flag"].names[-1])
    return option


def worded(exc: ProfilerError) -> str:
    """``exc`` as one line for a user of the command line."""
    if isinstance(exc, FakeCudaUnavailable):
        return f"--fake-cuda {exc.reason}"
    if isinstance(exc, MeasuredNotPredicted):
        return "--gpu predicts a named GPU under --fake-cuda only: add --fake-cuda (a run on a real GPU is measured)"
    if isinstance(exc, InputNotFound):
        return f"--input {exc.name} {exc.reason}"
    if isinstance(exc, MissingTorchApi):
        return f"{flag_of(exc.option)} needs {exc.api}, which this torch does not have"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextmanager
def library_errors() -> Iterator[None]:
    """A :class:`ProfilerError` that reaches the CLI (the profile could not start) becomes
    its one line and exit 2."""
    try:
        yield
    except ProfilerError as exc:
        raise CliError(worded(exc)) from None


@contextmanager
def warnings_worded(stream: TextIO | None = None) -> Iterator[None]:
    """While inside: every :class:`ProfilerWarning` is shown, each time, as ``gpuwatch:
    MESSAGE`` on stderr (one line); other warnings are shown as they would be. NB: the filter
    goes first, so that ``-W error`` or a script's own filters never turn the profiler's note
    into an exception or hide it."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", ProfilerWarning)
        shown = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if issubclass(category, ProfilerWarning):
                print(f"gpuwatch: {message}", file=stream or sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield
