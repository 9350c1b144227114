"""``gpuwatch profile`` and ``gpuwatch report``: run a script under the profiler, render reports."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gpuwatch.cli_errors import CliError
from gpuwatch.gpu_timeline import used_gpu_indices


def add_parsers(sub: Any, positive_int: Any, interval: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="run a PyTorch script and count its device copies, syncs and kernel time",
        description="Run a Python script (or -m module) under gpuwatch's profiler: every "
        "host->GPU, GPU->host and GPU->GPU copy, every host/GPU synchronisation and the kernel "
        "time of every op, charged to your own source lines. The summary goes to stderr; the "
        "script's own output is left alone.",
        usage="gpuwatch profile [options] (script.py | -m module) [args ...]",
    )
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    p.add_argument(
        "--json", dest="json_path", metavar="PATH", help="write the gpuwatch.profile/1 JSON here"
    )
    p.add_argument(
        "--html", dest="html_path", metavar="PATH", help="write a self-contained HTML report here"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    p.add_argument(
        "--top", type=positive_int, default=5, metavar="N", help="lines per top list (default 5)"
    )
    p.add_argument("--no-kernel-timing", action="store_true", help="count only; do not time ops")
    p.add_argument(
        "--user-code",
        action="append",
        metavar="DIR",
        help="only files under DIR count as your code (repeatable)",
    )
    p.add_argument(
        "--timeline-capacity",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="copy/sync events kept for the timeline (default 10000, newest kept)",
    )
    p.add_argument(
        "--gpu-interval",
        type=interval,
        default=0.5,
        metavar="SECONDS",
        help="GPU stats sampling interval for the timeline (default 0.5)",
    )
    p.add_argument("--no-gpu-stats", action="store_true", help="do not sample GPU stats with NVML")
    p.add_argument(
        "--trace-syncs",
        action="store_true",
        help="take syncs from PyTorch's GPU trace: also those inside ops no rule "
        "explains, at a cost on every CUDA event",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="watch it live: GPU stats, copies, syncs and hot lines while it runs "
        "(the script runs in a child process)",
    )
    p.add_argument(
        "--demo", action="store_true", help="with --live: simulated GPU cards (no NVML needed)"
    )
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="script.py [args ...]",
        help="the script and its arguments",
    )
    p.set_defaults(handler=run_profile)

    r = sub.add_parser(
        "report",
        help="re-render a saved gpuwatch profile JSON",
        description="Print the summary of a saved run (gpuwatch profile --json), optionally "
        "writing its HTML report.",
    )
    r.add_argument("path", metavar="RUN.json")
    r.add_argument("--html", dest="html_path", metavar="PATH", help="write the HTML report here")
    r.add_argument("--top", type=positive_int, default=5, metavar="N")
    r.set_defaults(handler=run_report)


def check_writable(path: str) -> None:
    """Raises CliError when ``path`` cannot be written, before a long run is wasted."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"cannot write the report to {path}: it is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise CliError(f"cannot write the report to {path}: no directory {parent}")
    if p.exists() and not os.access(p, os.W_OK):
        raise CliError(f"cannot write the report to {path}: permission denied")
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"cannot write the report to {path}: directory {parent} is not writable")


def _gpu_timeline(args: argparse.Namespace) -> tuple[Any, str]:
    if args.no_gpu_stats:
        return None, "off (--no-gpu-stats)"
    from gpuwatch.gpu_timeline import GpuTimeline
    from gpuwatch.nvml import NvmlUnavailable, Sampler, open_backend

    try:
        backend = open_backend()
    except NvmlUnavailable as exc:
        return None, "unavailable: " + str(exc).replace("; try --demo", "").replace(
            " Try --demo", ""
        )
    return GpuTimeline(
        Sampler(backend, interval_s=args.gpu_interval), args.gpu_interval
    ).start(), "NVML"


def run_profile(args: argparse.Namespace) -> int:
    import profilers
    from gpuwatch.runner import Target, TargetError, check_target, run_target

    if args.module:
        target = Target(args.module, args.args, module=True)
    elif args.args:
        target = Target(args.args[0], args.args[1:])
    else:
        raise CliError("no script given: gpuwatch profile [options] script.py [args ...]")
    try:
        check_target(target)
    except TargetError as exc:
        raise CliError(str(exc)) from None
    for path in (args.json_path, args.html_path):
        if path:
            check_writable(path)
    command = target.command
    if args.live:
        return run_live(args, target)
    if args.demo:
        raise CliError("--demo goes with --live (it simulates the GPU cards)")
    timeline, gpu_stats = _gpu_timeline(args)
    prof = profilers.profile(
        kernel_timing=not args.no_kernel_timing,
        user_code=args.user_code,
        timeline_capacity=args.timeline_capacity,
        trace_syncs=args.trace_syncs,
    )
    try:
        with prof:
            outcome = run_target(target)
    finally:
        samples = timeline.stop() if timeline is not None else []
    report = prof.report(command=command, exit_code=outcome.exit_code, partial=not outcome.finished)
    report.error = outcome.error
    report.options["gpu_stats"] = gpu_stats
    used = used_gpu_indices(report.devices)
    report.gpu_samples = [s for s in samples if used is None or s["gpu"] in used]
    failed = write_outputs(report, args.json_path, args.html_path)
    if not args.quiet:
        print_summary(report, args.top)
    if failed and outcome.exit_code == 0:
        return 2
    return outcome.exit_code


def run_live(args: argparse.Namespace, target: Any) -> int:
    from gpuwatch.app.live import LiveApp
    from gpuwatch.live.session import ChildSession, LiveOptions
    from gpuwatch.nvml import NvmlUnavailable, Sampler, open_backend

    sampler, reason = None, "off (--no-gpu-stats)"
    if not args.no_gpu_stats:
        try:
            sampler = Sampler(open_backend(demo=args.demo), interval_s=1.0)
        except NvmlUnavailable as exc:
            reason = str(exc).replace("; try --demo", "").replace(" Try --demo", "")
    session = ChildSession(
        LiveOptions(
            target.name,
            list(target.args),
            module=target.module,
            kernel_timing=not args.no_kernel_timing,
            user_code=args.user_code,
            timeline_capacity=args.timeline_capacity,
            trace_syncs=args.trace_syncs,
        )
    )
    app = LiveApp(
        session,
        sampler,
        no_gpu_reason=reason,
        json_path=args.json_path,
        html_path=args.html_path,
        top=args.top,
    )
    app.run()
    if app.fatal is not None:
        raise CliError(app.fatal)
    for ok, message in app.written:
        print(f"gpuwatch: {'' if ok else 'error: '}{message}", file=sys.stderr)
    if app.report is not None and not args.quiet:
        print_summary(app.report, args.top)
    failed = any(not ok for ok, _ in app.written)
    code = app.exit_code if app.exit_code is not None else 1
    return 2 if failed and code == 0 else code


def write_reports(
    report: Any, json_path: str | None, html_path: str | None
) -> list[tuple[bool, str]]:
    """Writes what was asked for; ``(ok, message)`` for each file, for the caller to show."""
    results: list[tuple[bool, str]] = []
    for path, kind in ((json_path, "json"), (html_path, "html")):
        if not path:
            continue
        try:
            if kind == "json":
                report.save(path)
            else:
                from gpuwatch.report.html import write_html

                write_html(report, path)
        except OSError as exc:
            results.append((False, f"cannot write the report to {path}: {exc.strerror or exc}"))
        else:
            results.append((True, f"wrote {path}"))
    return results


def write_outputs(report: Any, json_path: str | None, html_path: str | None) -> bool:
    """Writes the reports and says so on stderr. True if any write failed."""
    results = write_reports(report, json_path, html_path)
    for ok, message in results:
        print(f"gpuwatch: {'' if ok else 'error: '}{message}", file=sys.stderr)
    return not all(ok for ok, _ in results)


def print_summary(report: Any, top: int, file: Any = None) -> None:
    from rich.console import Console

    from gpuwatch.report.text import summary

    Console(file=file or sys.stderr, soft_wrap=False).print(summary(report, top=top))


def run_report(args: argparse.Namespace) -> int:
    from profilers import Report, ReportFormatError

    try:
        report = Report.load(args.path)
    except FileNotFoundError:
        raise CliError(f"no such file: {args.path}") from None
    except IsADirectoryError:
        raise CliError(f"{args.path} is a directory, not a report") from None
    except PermissionError:
        raise CliError(f"cannot read {args.path}: permission denied") from None
    except ReportFormatError as exc:
        raise CliError(str(exc)) from None
    if args.html_path:
        check_writable(args.html_path)
    print_summary(report, args.top, file=sys.stdout)
    return 2 if write_outputs(report, None, args.html_path) else 0
