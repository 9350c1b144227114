"""``gpuwatch diff before.json after.json``: two runs compared line by line, in the terminal,
as JSON (``gpuwatch.diff/1``) and as an HTML page; ``--budget`` fails (exit 3) on growth."""

from __future__ import annotations

import argparse
import sys

from gpuwatch.errors import CliError
from gpuwatch.flags import Outputs
from gpuwatch.profile.budget import add_budget_args, budget_for, enforce

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
    from gpuwatch.output.load import load_report
    from gpuwatch.output.write import Output, check_outputs, output_for
    from profilers.diff import check_growth, diff_reports
    from profilers.report import write_text_atomic

    wanted = [
        Output(kind, path)
        for kind, path in (("json", args.json_path), ("html", args.html_path))
        if path is not None
    ]
    wanted += [output_for(path, trace=False) for path in args.output_paths]
    if any(out.kind == "trace" for out in wanted):
        raise CliError("a diff has no Chrome trace: -o takes .json or .html here")
    check_outputs(wanted, inputs=[args.before, args.after])
    limits = budget_for(args.budget, args.no_budget, growth=True)
    diff = diff_reports(load_report(args.before), load_report(args.after))
    paths = (args.before, args.after)
    if not args.quiet:
        from gpuwatch.output.diff_text import print_diff

        print_diff(diff, paths, args.top)
    for out in wanted:
        if out.kind == "json":
            from profilers.finite import dumps_finite

            text = dumps_finite(diff.to_dict(*paths), indent=1) + "\n"
        else:
            from gpuwatch.output.diff_html import render_html

            text = render_html(diff, paths)
        try:
            write_text_atomic(out.path, text)
        except OSError as exc:
            raise CliError(f"cannot write {out.path}: {exc.strerror or exc}") from None
        if not args.quiet:
            print(f"gpuwatch: wrote {out.path}", file=sys.stderr)
    return enforce(limits, lambda b: check_growth(b, diff), 0, args.quiet, " in growth")
