"""The analysis of gpuwatch's documents: :func:`analyze` works out once what every output says
(a run's findings, a diff's, a trace's), as data the renderers (``gpuwatch/output/``) only format
and ``gpuwatch report FILE`` renders again from the JSON. The trace's analysis stays beside its
reader (``profilers/kineto/analyse.py``), which a pool's or Dask worker's process runs. Light to
import: the analysis itself is loaded by :func:`analyze`, not by its types."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from gpuwatch.analysis.diff import RunDiff
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.analysis.findings import Findings
    from profilers import Report
    from profilers.kineto.events import RankTrace
    from profilers.kineto.result import TraceAnalysis


@overload
def analyze(document: Report) -> Findings: ...
@overload
def analyze(document: RunDiff) -> DiffDoc: ...
@overload
def analyze(document: RankTrace) -> TraceAnalysis: ...
def analyze(document: Report | RunDiff | RankTrace) -> Findings | DiffDoc | TraceAnalysis:
    """The findings of a run, of two runs compared (:func:`~gpuwatch.analysis.diff.
    diff_reports`), or of a torch.profiler trace (``profilers.kineto.read.read_trace``)."""
    from gpuwatch.analysis.diff import RunDiff

    events = sys.modules.get("profilers.kineto.events")  # NB: not loaded: not a RankTrace
    if events is not None and isinstance(document, events.RankTrace):
        from profilers.kineto.analyse import analyse

        return analyse([document], [document.path])
    if isinstance(document, RunDiff):
        from gpuwatch.analysis.diff_findings import DiffDoc

        return DiffDoc.written(document.to_dict(*document.paths))
    from gpuwatch.analysis.profile import analyze_run

    return analyze_run(document)  # type: ignore[arg-type]  # NB: a RankTrace went above
