"""The analysis of gpuwatch's documents: :func:`analyze` works out once what every output says,
as data (findings), and the renderers (``gpuwatch/output/``) only format them.

- a run (``gpuwatch.profile/1``): ``profile.py`` gives :class:`~gpuwatch.analysis.findings.
  Findings` (the verdict and its causes, each line's cost, the hints from the registry in
  ``hints.py`` and ``library_hints.py``, the what-if rows, the ranks' spread), written into the
  run's JSON under ``findings``; energy per step is worked out once when the run ends
  (``energy.py``), from the counter's samples, which the document does not keep;
- two runs (``gpuwatch.diff/1``): ``diff.py`` matches their lines and ``diff_findings.py`` reads
  the document it writes, which is what the diff's outputs show, then and when read back;
- a torch.profiler trace read (``RankTrace``): ``profilers/kineto/analyse.py`` gives its
  ``TraceAnalysis`` (``gpuwatch.kineto/1``). The module stays beside the reader: a folder of
  ranks is read and analysed rank by rank in a pool's or a Dask worker's process (only the
  findings travel back), where the gpuwatch package need not be whole.

Each document's findings are re-rendered from its JSON by ``gpuwatch report FILE``.
Light to import: the analysis itself is loaded by :func:`analyze`, not by its types.
"""

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

    events = sys.modules.get("profilers.kineto.events")  # NB: not loaded: no trace was read
    if events is not None and isinstance(document, events.RankTrace):
        from profilers.kineto.analyse import analyse

        return analyse([document], [document.path])

    if isinstance(document, RunDiff):
        from gpuwatch.analysis.diff_findings import DiffDoc

        return DiffDoc.written(document.to_dict(*document.paths))
    from gpuwatch.analysis.profile import analyze_run

    return analyze_run(document)  # type: ignore[arg-type]  # NB: a RankTrace went above
