"""Telling a torch.profiler trace from a gpuwatch run by what the file holds (never by its name
alone), and reading one, or a folder of one per rank, into the analysis.

A gpuwatch run is a JSON object whose ``schema`` is ``gpuwatch.profile/1``; a trace is gzip
(gpuwatch never compresses its JSON), a JSON array of events, or an object with ``traceEvents``.
Anything else goes to the run's loader, whose messages for a bad file stay as they were.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from gpuwatch.errors import CliError
from profilers.kineto.result import TraceAnalysis

HEAD_BYTES = 1 << 20
_GPUWATCH = re.compile(rb'"schema"\s*:\s*"gpuwatch\.')


def is_trace(path: str) -> bool:
    """True when ``path`` is a folder, or a regular file whose content is a trace's."""
    try:
        info = os.stat(path)
    except OSError:
        return False  # the run's loader says what is wrong with it
    if stat.S_ISDIR(info.st_mode):
        return True
    if not stat.S_ISREG(info.st_mode):
        return False  # a pipe is read once, by the run's loader
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        return True
    if _GPUWATCH.search(head):
        return False
    return head.lstrip().startswith(b"[") or b'"traceEvents"' in head


def load_analysis(
    paths: Sequence[str], jobs: int | None = None, scheduler: str | None = None, show: bool = False
) -> TraceAnalysis:
    """The analysis of the traces at ``paths``, read as :func:`read_ranks` says; one-line
    :class:`CliError` for a bad one."""
    from gpuwatch.output.kineto_pool import read_ranks
    from profilers.kineto.read import TraceError

    for path in paths:
        if not is_trace(path):
            raise CliError(
                f"{path} is not a torch.profiler trace: a gpuwatch run and a trace cannot be "
                "reported together"
            )
    try:
        return read_ranks(paths, jobs, scheduler, show)
    except TraceError as exc:
        raise CliError(str(exc)) from None
