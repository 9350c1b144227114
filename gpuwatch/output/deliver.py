"""A finished report handed to the user: analysed once (:func:`~gpuwatch.analysis.analyze`),
its files written by their renderers, then the summary (or the what-if table) printed from the
same findings, so that every output says the same. The one place that works findings out."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from gpuwatch.analysis import analyze  # noqa: TID251 - the one place that analyses
from gpuwatch.analysis.findings import Findings
from gpuwatch.output.write import Output, say, write_reports
from profilers import Report


def deliver(
    report: Report,
    wanted: Sequence[Output],
    *,
    top: int,
    quiet: bool,
    summary: bool = True,
    what_if: bool = False,
    file: TextIO | None = None,
    findings: Findings | None = None,
) -> bool:
    """Writes ``wanted`` and, unless ``quiet``, prints the summary (``summary``) and the what-if
    table (``what_if``) on ``file`` (stderr by default), all from one analysis (``findings``,
    worked out here when not given: a saved report's own, a live run's). True if any file
    failed."""
    try:
        if findings is None:
            findings = analyze(report)
    except Exception as exc:  # a bug of ours must not cost the report's files: said, in a line
        say(write_reports(report, wanted, exc), quiet=quiet)  # the HTML says why it is not
        print(
            f"gpuwatch: error: could not analyse the run ({type(exc).__name__}: {exc}); the "
            "summary is not shown",
            file=sys.stderr,
        )
        return True
    failed = say(write_reports(report, wanted, findings), quiet=quiet)
    if quiet:
        return failed
    try:
        if summary:
            from gpuwatch.output.text import print_summary

            print_summary(report, top, file, findings)
        if what_if:
            from gpuwatch.output.whatif import what_if_lines

            print("\n".join(what_if_lines(report)), file=file or sys.stderr)
    except OSError:
        raise  # a closed pipe or terminal: the CLI ends quietly on it
    except Exception as exc:  # a bug of ours, after the files are out: said, in a line
        print(
            f"gpuwatch: error: could not print the summary ({type(exc).__name__}: {exc}); the "
            "report's files are written",
            file=sys.stderr,
        )
        return True
    return failed
