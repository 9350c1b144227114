"""The analysis of gpuwatch's documents: :func:`analyze` works out once what every output says,
as data (findings), and the renderers (``gpuwatch/output/``) only format them.

- a run (``gpuwatch.profile/1``): ``profile.py`` gives :class:`~gpuwatch.analysis.findings.
  Findings` (the verdict and its causes, each line's cost, the hints from the registry in
  ``hints.py`` and ``library_hints.py``, the what-if rows, the ranks' spread), written into the
  run's JSON under ``findings``; energy per step is worked out once when the run ends
  (``energy.py``), from the counter's samples, which the document does not keep;
- two runs (``gpuwatch.diff/1``): ``diff.py`` matches their lines and ``diff_findings.py`` reads
  the document it writes, which is what the diff's outputs show, then and when read back;
- a torch.profiler trace (``gpuwatch.kineto/1``) is analysed where it is read
  (``profilers/kineto/analyse.py``: in the reading process, a pool's or a Dask worker's, so the
  events never travel), its findings the ``TraceAnalysis``.

Each document's findings are re-rendered from its JSON by ``gpuwatch report FILE``.
Light to import: the analysis itself is loaded by :func:`analyze`, not by its types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from gpuwatch.analysis.diff import RunDiff
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.analysis.findings import Findings
    from profilers import Report


@overload
def analyze(document: Report) -> Findings: ...
@overload
def analyze(document: RunDiff) -> DiffDoc: ...
def analyze(document: Report | RunDiff) -> Findings | DiffDoc:
    """The findings of a run, or of two runs compared (:func:`~gpuwatch.analysis.diff.
    diff_reports`)."""
    from gpuwatch.analysis.diff import RunDiff

    if isinstance(document, RunDiff):
        from gpuwatch.analysis.diff_findings import DiffDoc

        return DiffDoc.written(document.to_dict(*document.paths))
    from gpuwatch.analysis.profile import analyze_run

    return analyze_run(document)
