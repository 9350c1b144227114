"""``gpuwatch report``: a saved run (or the ranks of one distributed run) shown again, written
again in other formats, and checked against a budget; or a torch.profiler trace (or a folder of
ranks) analysed: where each step's GPU idle time went."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpuwatch.errors import CliError
from gpuwatch.flags import Outputs
from gpuwatch.profile.budget import add_budget_args, budget_for, check_run

if TYPE_CHECKING:
    from gpuwatch.analysis.diff_findings import DiffDoc

OUTPUTS = Outputs(
    json_doc="the (merged) gpuwatch.profile/1 JSON",
    html_doc="the HTML report",
    trace_doc="a Chrome trace (Perfetto opens it)",
    quiet_help="quiet: no summary, no 'wrote' lines",
    top_default=None,
    top_help="lines per top list (default 5; a saved diff's lines: 20)",
)


def declare(r: argparse.ArgumentParser) -> None:
    r.description = (
        "Print the summary of a saved run (gpuwatch profile --json), optionally "
        "writing its HTML report. Given a torch.profiler trace instead (.json or .json.gz from "
        "export_chrome_trace() or tensorboard_trace_handler, or a folder of one per rank), "
        "print where each step's GPU idle time went: busy, and idle by input, sync, copy, comm "
        "and launch, with the lines charged (docs/trace.md). A run's rank files are read in "
        "parallel: one process per core (--jobs), or on a Dask cluster's workers (--scheduler)."
    )
    r.add_argument(
        "paths",
        nargs="+",
        metavar="RUN.json|TRACE|DIFF.json",
        help="a saved run; several: the reports of a distributed run's ranks, merged. Or a "
        "torch.profiler trace, several, or a folder of them (one per rank). Or a saved diff "
        "(gpuwatch diff --json), shown again",
    )
    OUTPUTS.declare(r)
    r.add_argument(
        "--what-if",
        action="store_true",
        help="print what each fix would save per step instead of the summary (the run's "
        "replayed or predicted what-ifs, their combined saving and overlap)",
    )
    r.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help="traces: read the rank files in N processes (default: one per core, up to one per "
        "rank, when the files pass 1 MiB; 1: in this process)",
    )
    r.add_argument(
        "--scheduler",
        metavar="tcp://HOST:8786",
        help="traces: read each rank file on the workers of this Dask scheduler, which need "
        "gpuwatch installed and the files at the same path (a shared filesystem); "
        "pip install 'gpuwatch[dask]'",
    )
    add_budget_args(r)
    r.set_defaults(handler=run_report)


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return int(text)


def run_report(args: argparse.Namespace) -> int:
    from gpuwatch.output.kineto_load import is_trace

    if any(is_trace(p) for p in args.paths):
        return run_trace_report(args)
    if args.scheduler is not None:
        raise CliError(f"--scheduler reads torch.profiler traces; {args.paths[0]} is not one")
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.output.deliver import deliver
    from gpuwatch.output.load import load_document, load_report
    from gpuwatch.output.write import check_outputs, output_for, outputs

    wanted = outputs(args.json_path, args.html_path, args.trace_path)
    wanted += [output_for(path) for path in args.output_paths]
    check_outputs(wanted, inputs=args.paths)
    limits = budget_for(args.budget, args.no_budget)
    findings = None  # NB: a saved run says what it said: its findings, not analysed again
    if len(args.paths) == 1:
        loaded = load_document(args.paths[0])
        if isinstance(loaded, DiffDoc):
            return run_diff_report(args, loaded)
        report, findings = loaded
    else:
        from profilers.merge import DifferentRuns, MergeError, merge_ranks

        try:
            report = merge_ranks([load_report(p) for p in args.paths], list(args.paths))
        except DifferentRuns as exc:
            raise CliError(
                f"{exc}; to compare two runs: gpuwatch diff {' '.join(args.paths[:2])}"
            ) from None
        except MergeError as exc:
            raise CliError(str(exc)) from None
    failed = deliver(
        report,
        wanted,
        top=args.top or 5,
        quiet=args.quiet,
        summary=not args.what_if,
        what_if=args.what_if,
        file=sys.stdout,
        findings=findings,
    )
    return check_run(limits, report, 2 if failed else 0, args.quiet)


def run_trace_report(args: argparse.Namespace) -> int:
    """``gpuwatch report TRACE``: a torch.profiler trace (or a folder of ranks) analysed."""
    from gpuwatch.output.kineto_load import is_saved, load_analysis
    from gpuwatch.output.kineto_text import print_summary
    from gpuwatch.output.write import check_outputs, output_for, outputs, say, write_document

    if args.what_if:
        raise CliError("--what-if replays a gpuwatch run; a torch.profiler trace has no replay")
    if args.budget is not None:
        raise CliError("--budget checks a gpuwatch run's copies and syncs; a trace has no counts")
    wanted = outputs(args.json_path, args.html_path, args.trace_path)
    wanted += [output_for(path) for path in args.output_paths]
    check_outputs(wanted, inputs=args.paths)
    if any(o.kind == "trace" for o in wanted) and any(map(is_saved, args.paths)):
        raise CliError(
            "a Chrome trace is drawn from the torch.profiler trace itself: the saved analysis "
            "keeps no timeline (gpuwatch report TRACE --trace OUT)"
        )
    show = not args.quiet and sys.stderr.isatty()
    analysis = load_analysis(args.paths, args.jobs, args.scheduler, show)
    if not args.quiet:
        print_summary(analysis, args.top or 5, file=sys.stdout)
    failed = say(write_document("trace", analysis, wanted), quiet=args.quiet)
    return 2 if failed else 0


def run_diff_report(args: argparse.Namespace, diff: DiffDoc) -> int:
    """``gpuwatch report D.json``: a diff's saved JSON shown and written again as it was."""
    from gpuwatch.cli import diff as cli_diff

    for given, what in ((args.what_if, "--what-if"), (args.budget is not None, "--budget")):
        if given:
            raise CliError(f"{what} takes a run, not a diff (gpuwatch diff --budget checks growth)")
    wanted = cli_diff.diff_outputs(args, args.paths)
    top = int(args.top or cli_diff.OUTPUTS.top_default or 0)
    return 2 if cli_diff.show_diff(diff, wanted, top, args.quiet) else 0
