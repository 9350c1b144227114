"""Jupyter: ``%load_ext gpuwatch``, then ``%%gpuwatch`` profiles a cell (``%gpuwatch stmt`` one
line) and shows its report inline: the self-contained HTML report for ``text/html`` (plotly.js
inside, no network) and the text summary for ``text/plain``. A ``profilers.Report`` that is the last
expression of a cell displays the same way once the extension is loaded.
"""

from __future__ import annotations

import io
from typing import Any

from profilers import Report


class ShownReport:
    """A report as a notebook shows it."""

    def __init__(self, report: Report, top: int = 5) -> None:
        self.report = report
        self.top = top

    def _repr_html_(self) -> str:
        return html_of(self.report)

    def __repr__(self) -> str:
        return text_of(self.report, self.top)


def html_of(report: Report) -> str:
    from gpuwatch.report.html import render_html

    return render_html(report)


def text_of(report: Report, top: int = 5) -> str:
    from rich.console import Console

    from gpuwatch.report.text import summary

    out = io.StringIO()
    Console(file=out, width=100, color_system=None, force_jupyter=False).print(
        summary(report, top=top)
    )
    return out.getvalue()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gpuwatch``: the magics, and reports shown as HTML and text."""
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class GpuwatchMagics(Magics):
        @line_cell_magic
        def gpuwatch(self, line: str, cell: str | None = None) -> ShownReport:
            """``%%gpuwatch`` profiles the cell; ``%gpuwatch stmt`` one statement."""
            import profilers

            code = cell if cell is not None else line
            shell = self.shell
            assert shell is not None  # a magic runs in a shell
            with profilers.profile() as prof:
                # NB: silent: the report is the cell's result, not its last expression
                shell.run_cell(code, store_history=False, silent=True)  # type: ignore[no-untyped-call]
            report = prof.report(command=["%%gpuwatch" if cell is not None else "%gpuwatch"])
            return ShownReport(report)

    ipython.register_magics(GpuwatchMagics)
    formatters = ipython.display_formatter.formatters
    formatters["text/html"].for_type(Report, html_of)
    formatters["text/plain"].for_type(Report, lambda r, p, cycle: p.text(text_of(r)))
