"""``gpuwatch diff before.json after.json``: two runs compared line by line, in the terminal,
as JSON (``gpuwatch.diff/1``) and as an HTML page; ``--budget`` fails (exit 3) on growth."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpuwatch.errors import CliError
from gpuwatch.flags import Outputs
from gpuwatch.profile.budget import add_budget_args, budget_for, enforce

if TYPE_CHECKING:
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.output.write import Output

OUTPUTS = Outputs(
    json_doc="the gpuwatch.diff/1 JSON",
    html_doc="an HTML page",
    trace_doc=None,
    what="the diff",
    quiet_help="no terminal table",
    top_default=20,
    top_help="lines shown in the terminal; the JSON and HTML have every line",
)


def declare(d: argparse.ArgumentParser) -> None:
    d.description = (
        "Compare two saved runs (gpuwatch profile --json) line by line: copies, "
        "bytes, syncs by cause, collectives and kernel time, per step where both runs counted "
        "steps. Lines are matched by their source text and function, so a line that moved is "
        "still the same line; lines that appeared or disappeared are said."
    )
    d.add_argument("before", metavar="BEFORE.json", help="the run before the change")
    d.add_argument("after", metavar="AFTER.json", help="the run after it")
    OUTPUTS.declare(d)
    add_budget_args(d, growth=True)
    d.set_defaults(handler=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    from gpuwatch.analysis import analyze
    from gpuwatch.analysis.diff import check_growth, diff_reports
    from gpuwatch.output.load import load_report

    wanted = diff_outputs(args, [args.before, args.after])
    limits = budget_for(args.budget, args.no_budget, growth=True)
    paths = (args.before, args.after)
    diff = diff_reports(load_report(args.before), load_report(args.after), paths)
    failed = show_diff(analyze(diff), wanted, args.top, args.quiet)
    return enforce(limits, lambda b: check_growth(b, diff), 2 * failed, args.quiet, " in growth")


def diff_outputs(args: argparse.Namespace, inputs: list[str]) -> list[Output]:
    """The files asked for (a diff has no Chrome trace), checked against the ``inputs``."""
    from gpuwatch.output.write import check_outputs, output_for, outputs

    wanted = outputs(args.json_path, args.html_path, getattr(args, "trace_path", None))
    wanted += [output_for(path, trace=False) for path in args.output_paths]
    if any(out.kind == "trace" for out in wanted):
        raise CliError("a diff has no Chrome trace: it writes .json and .html")
    check_outputs(wanted, inputs=inputs)
    return wanted


def show_diff(doc: DiffDoc, wanted: list[Output], top: int, quiet: bool) -> int:
    """Prints the diff and writes its files; how many could not be written (``gpuwatch
    diff``, and ``gpuwatch report D.json`` of the diff's JSON)."""
    from gpuwatch.output.write import say, write_document

    if not quiet:
        from gpuwatch.output.diff_text import print_diff

        print_diff(doc, top)
    # NB: a file that cannot be written costs itself only, said in a line, as every output
    return say(write_document("diff", doc, wanted), quiet=quiet)
