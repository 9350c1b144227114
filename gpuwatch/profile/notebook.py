"""Jupyter: ``%load_ext gpuwatch``, then ``%%gpuwatch [options]`` profiles a cell (``%gpuwatch
stmt`` one statement) and shows its report inline, as does a ``profilers.Report`` that ends a cell.

The report stays small: HTML tables with a scoped style, the text summary, and each chart in
plotly's own MIME type (JupyterLab, Notebook 7 and VS Code draw it with their plotly.js), so no
cell carries plotly.js. The options are ``gpuwatch profile``'s marked for the magic; an unknown
one is a one-line error and the cell does not run. A cell that raises shows its partial report,
then its exception, as it would without the magic.
"""

from __future__ import annotations

import argparse
import io
import shlex
from typing import TYPE_CHECKING, Any, NoReturn

from gpuwatch.profile.options import ProfileOptions
from profilers import Report

if TYPE_CHECKING:
    from gpuwatch.analysis.findings import Findings
    from gpuwatch.output.write import Output

#: The exit code a report records for an interrupted cell, as the CLI's Ctrl-C.
INTERRUPTED = 130


class ShownReport:
    """A report as a notebook shows it."""

    def __init__(self, report: Report, top: int = 5) -> None:
        self.report = report
        self.top = top

    def _ipython_display_(self) -> None:
        show(self.report, self.top)

    def __repr__(self) -> str:
        return text_of(self.report, self.top)


def show(report: Report, top: int = 5) -> None:
    """Displays ``report``: its tables with the text summary, then each chart."""
    from IPython.display import display

    from gpuwatch.analysis import analyze
    from gpuwatch.output.html import render_fragment

    findings = analyze(report)
    page, figures = render_fragment(report, findings)
    text = text_of(report, top, findings)
    display({"text/html": page, "text/plain": text}, raw=True)  # type: ignore[no-untyped-call]
    for _, fig in figures:
        title = fig.layout.title.text or "chart"
        # NB: plotly's own MIME type, not fig.show(): the output holds the figure's data only,
        # whatever renderer plotly.io is set to in this kernel.
        bundle = {
            "application/vnd.plotly.v1+json": fig.to_plotly_json(),
            "text/plain": f"<gpuwatch chart: {title}>",
        }
        display(bundle, raw=True)  # type: ignore[no-untyped-call]


def text_of(report: Report, top: int = 5, findings: Findings | None = None) -> str:
    from rich.console import Console

    from gpuwatch.analysis import analyze
    from gpuwatch.output.text import summary

    out = io.StringIO()
    Console(file=out, width=100, color_system=None, force_jupyter=False).print(
        summary(report, findings or analyze(report), top=top)
    )
    return out.getvalue()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _usage(message)


def magic_parser() -> argparse.ArgumentParser:
    """``%%gpuwatch``'s options: those of ``gpuwatch profile`` that mean something in a kernel."""
    from gpuwatch.profile.options import add_arguments

    p = _Parser(prog="%%gpuwatch", add_help=False, allow_abbrev=False, exit_on_error=False)
    add_arguments(p, magic=True)
    return p


def _usage(message: str) -> NoReturn:
    from IPython.core.error import UsageError

    raise UsageError(f"%%gpuwatch: {message}")


def parse_options(line: str) -> tuple[ProfileOptions, list[Output]]:
    """``(options, outputs)`` of a magic's line; UsageError (one line) for anything it does not
    know."""
    from gpuwatch.errors import CliError
    from gpuwatch.output.write import check_outputs, output_for, outputs

    try:
        words = shlex.split(line)
    except ValueError as exc:
        _usage(str(exc))
    try:
        # NB: no checkpoints in a kernel: the cell's report is built when the cell ends.
        options = ProfileOptions.from_namespace(magic_parser().parse_args(words)).replace(
            checkpoint_s=0.0
        )
    except argparse.ArgumentError as exc:
        _usage(str(exc))
    if options.fake_gpus != 1 and not options.fake_cuda:
        _usage("--fake-gpus goes with --fake-cuda")
    if options.fake_memory_bytes is not None and not options.fake_cuda:
        _usage("--fake-memory goes with --fake-cuda")
    if options.fake_values is not None and not options.fake_cuda:
        _usage("--fake-values goes with --fake-cuda")
    try:
        wanted = outputs(options.json_path, options.html_path, options.trace_path)
        wanted += [output_for(path) for path in options.output_paths]
        check_outputs(wanted)
        if options.fake_cuda:
            from gpuwatch.profile.worded import library_errors
            from profilers.fake_cuda.harness import guard_library

            with library_errors():
                guard_library()
    except CliError as exc:
        _usage(str(exc))
    return options, wanted


def profile_cell(shell: Any, line: str, cell: str, magic: str = "%%gpuwatch") -> ShownReport:
    """Runs ``cell`` in the user's namespace under the options of ``line``; its report is the
    result. The cell's exception, after the report is shown and written, is raised again."""
    from contextlib import nullcontext

    from gpuwatch.output.deliver import deliver

    options, wanted = parse_options(line)
    fake = options.fake_gpus_harness()
    # NB: the cell is compiled and run here rather than through shell.run_cell, which catches
    # and prints the exception itself: the cell would then end "ok", the report would say
    # "finished", and a notebook run with nbclient would go on past a failed cell.
    # NB: a blank first line for the magic's own, so that tracebacks and the report's line
    # numbers are the cell's; the number is the cell's In[n] (the count has moved on by now).
    code = (
        "\n" + shell.transform_cell(cell) if magic.startswith("%%") else shell.transform_cell(cell)
    )
    filename = shell.compile.cache(code, max(1, shell.execution_count - 1))
    compiled = compile(code, filename, "exec", dont_inherit=True)
    failure: BaseException | None = None
    prof = options.profiler()
    with fake if fake is not None else nullcontext(), prof:
        try:
            exec(compiled, shell.user_global_ns, shell.user_ns)
        except BaseException as exc:  # the cell's own, raised again below
            failure = exc
    exit_code = 0
    if isinstance(failure, SystemExit):
        exit_code = failure.code if isinstance(failure.code, int) else 1
    elif failure is not None:
        exit_code = INTERRUPTED if isinstance(failure, KeyboardInterrupt) else 1
    report = prof.report(
        command=[magic, *shlex.split(line)], exit_code=exit_code, partial=failure is not None
    )
    if failure is not None:
        name, said = type(failure).__name__, str(failure)
        report = report.replace(error=(f"{name}: {said}" if said else name).splitlines()[0][:500])
    if fake is not None:
        report = fake.mark(report)
    if wanted:
        deliver(report, wanted, top=options.top, quiet=False, summary=False)
    shown = ShownReport(report, options.top)
    if failure is None:
        return shown
    from IPython.display import display

    display(shown)  # type: ignore[no-untyped-call]
    __tracebackhide__ = True  # noqa: F841 (IPython leaves this frame out of the traceback)
    raise failure


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gpuwatch``: the magics, and reports shown as HTML, text and charts."""
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class GpuwatchMagics(Magics):
        @line_cell_magic
        def gpuwatch(self, line: str, cell: str | None = None) -> ShownReport:
            """``%%gpuwatch [--json PATH] [--no-kernel-timing] [--fake-cuda] ...`` profiles the
            cell (the options of ``gpuwatch profile``); ``%gpuwatch stmt`` one statement."""
            __tracebackhide__ = True  # noqa: F841 (IPython leaves this frame out of tracebacks)
            if cell is not None:
                return profile_cell(self.shell, line, cell)
            if line.lstrip().startswith("-"):
                _usage("options go on the cell form: %%gpuwatch --json r.json, then the code")
            return profile_cell(self.shell, "", line, magic="%gpuwatch")

    ipython.register_magics(GpuwatchMagics)
    formatters = ipython.display_formatter
    formatters.ipython_display_formatter.for_type(Report, lambda r: show(r))
    formatters.formatters["text/plain"].for_type(Report, lambda r, p, cycle: p.text(text_of(r)))
