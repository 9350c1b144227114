"""What a live run leaves once its app has closed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from profilers.report import Report

if TYPE_CHECKING:
    from gpuwatch.analysis.findings import Findings


@dataclass(frozen=True)
class LiveResult:
    """What a live run leaves once the app has closed."""

    exit_code: int
    """The exit code a shell expects: the script's, or 128 + the signal that ended it."""
    report: Report | None
    written: list[tuple[bool, str]]
    """``(ok, message)`` per report file."""
    fatal: str | None
    """Why the script could not start at all."""
    signalled: int | None
    findings: Findings | None = None
    """The report's analysis (gpuwatch/analysis/profile.py), worked out once as the run ended."""
