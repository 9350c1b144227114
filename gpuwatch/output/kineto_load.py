"""Telling a torch.profiler trace from a gpuwatch run by what the file holds (never by its name
alone), and reading one, or a folder of one per rank, into the analysis.

A gpuwatch run is a JSON object whose ``schema`` is ``gpuwatch.profile/1``; a trace is gzip
(gpuwatch never compresses its JSON), a JSON array of events, or an object with ``traceEvents``;
a trace's saved analysis (``gpuwatch report TRACE --json A``) is read back as the trace's.
Anything else goes to the run's loader, whose messages for a bad file stay as they were.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence

from gpuwatch.errors import CliError
from profilers.kineto.result import TraceAnalysis

HEAD_BYTES = 1 << 20
_GPUWATCH = re.compile(rb'"schema"\s*:\s*"gpuwatch\.')
_SAVED = re.compile(rb'"schema"\s*:\s*"gpuwatch\.kineto/1"')


def is_trace(path: str) -> bool:
    """True when ``path`` is a folder, or a regular file whose content is a trace's or a trace's
    saved analysis."""
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
        return _SAVED.search(head) is not None
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
    if any(is_saved(p) for p in paths):
        if len(paths) > 1:
            raise CliError("a saved trace analysis is reported alone, not with other files")
        return load_saved(paths[0])
    try:
        return read_ranks(paths, jobs, scheduler, show)
    except TraceError as exc:
        raise CliError(str(exc)) from None


def is_saved(path: str) -> bool:
    """True when ``path`` holds a trace's saved analysis (``gpuwatch.kineto/1``)."""
    try:
        with open(path, "rb") as f:
            return _SAVED.search(f.read(HEAD_BYTES)) is not None
    except OSError:  # a folder, or what the loaders say is wrong with it
        return False


def load_saved(path: str) -> TraceAnalysis:
    """The analysis ``path`` saved, checked against its schema; one-line :class:`CliError`."""
    from gpuwatch.output.load import problem
    from profilers.kineto.result import SCHEMA, analysis_from_dict

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, RecursionError) as exc:  # NB: UnicodeDecodeError, JSONDecodeError
        raise CliError(f"cannot read the saved trace analysis {path}: {exc}") from None
    wrong = problem(doc, SCHEMA)
    if wrong is not None:
        raise CliError(f"damaged gpuwatch trace analysis {path}: {wrong}")
    try:
        return analysis_from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:  # what the schema lets through
        raise CliError(f"damaged gpuwatch trace analysis {path}: {exc}") from None
