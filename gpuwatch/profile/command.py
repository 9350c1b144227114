"""``gpuwatch profile`` and ``gpuwatch report``: run a script under the profiler, render reports."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuwatch.errors import CliError
from gpuwatch.profile.budget import add_budget_args, budget_for, check_run
from gpuwatch.profile.gpu_args import add_gpu_args, check_fake_cuda, check_gpu, fake_cuda_errors

#: Copy/sync events a timeline may keep: 10 million is about 1 GB of JSON.
MAX_TIMELINE_CAPACITY = 10_000_000


def add_parsers(sub: Any, bounded_int: Any, interval: Any) -> None:
    positive_int = bounded_int(1, 1_000_000)
    p = sub.add_parser(
        "profile",
        allow_abbrev=False,
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
    p.add_argument(
        "--trace",
        dest="trace_path",
        metavar="PATH",
        help="write the copies, syncs and GPU samples as a Chrome trace (Perfetto opens it)",
    )
    p.add_argument(
        "-o",
        dest="output_paths",
        action="append",
        default=[],
        metavar="PATH",
        help="write a report here, its kind from the ending: .json, .html or .trace.json "
        "(repeatable)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="quiet: no summary, no 'wrote' lines (errors only)",
    )
    p.add_argument(
        "--top", type=positive_int, default=5, metavar="N", help="lines per top list (default 5)"
    )
    p.add_argument(
        "--no-kernel-timing",
        action="store_true",
        help="count copies, syncs and collectives only: no kernel time, no op counts; only the "
        "ops that copy, sync or communicate reach Python (several times cheaper per op)",
    )
    p.add_argument(
        "--count-ops",
        action="store_true",
        help="with --no-kernel-timing: still count every op per line (every op enters Python)",
    )
    p.add_argument(
        "--user-code",
        action="append",
        metavar="DIR",
        help="only files under DIR count as your code (repeatable)",
    )
    p.add_argument(
        "--timeline-capacity",
        type=bounded_int(0, MAX_TIMELINE_CAPACITY),
        default=10_000,
        metavar="N",
        help="copy/sync events kept for the timeline (default 10000, newest kept; "
        "at most 10000000)",
    )
    p.add_argument(
        "--checkpoint",
        type=_checkpoint,
        default=30.0,
        metavar="SECONDS",
        help="with --json: rewrite the JSON report every SECONDS while the script runs, so a "
        "SIGKILLed run (the OOM killer) still leaves a partial report (default 30; 0 turns "
        "it off)",
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
        "--fake-cuda",
        action="store_true",
        help="no GPU needed: run the script against simulated GPUs and count the copies and "
        "syncs it would make on real ones; values it reads back from them are placeholders "
        "(zeros), and no kernel time is measured",
    )
    p.add_argument(
        "--fake-gpus",
        type=bounded_int(1, 8),
        default=1,
        metavar="N",
        help="with --fake-cuda: how many GPUs the machine has (default 1, at most 8)",
    )
    add_gpu_args(p)
    p.add_argument(
        "--steps",
        type=_step_window,
        default=None,
        metavar="A:B",
        help="profile steps A to B-1 only (0-based; A: to the end), a step ended by each "
        "optimizer.step() or profilers.step(); outside them the script runs at full speed",
    )
    p.add_argument(
        "--nproc-per-node",
        type=bounded_int(1, 1024),
        default=0,
        metavar="N",
        help="launch N ranks with PyTorch's launcher (torch.distributed.run), profile each, and "
        "merge their reports into the paths given (one summary for all ranks)",
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
    add_budget_args(p)
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="script.py [args ...]",
        help="the script and its arguments",
    )
    p.set_defaults(handler=run_profile)

    r = sub.add_parser(
        "report",
        allow_abbrev=False,
        help="re-render a saved gpuwatch profile JSON",
        description="Print the summary of a saved run (gpuwatch profile --json), optionally "
        "writing its HTML report.",
    )
    r.add_argument(
        "paths",
        nargs="+",
        metavar="RUN.json",
        help="a saved run; several: the reports of a distributed run's ranks, merged",
    )
    r.add_argument(
        "--json", dest="json_path", metavar="PATH", help="write the (merged) JSON report here"
    )
    r.add_argument("--html", dest="html_path", metavar="PATH", help="write the HTML report here")
    r.add_argument(
        "--trace", dest="trace_path", metavar="PATH", help="write a Chrome trace (Perfetto) here"
    )
    r.add_argument(
        "--top", type=positive_int, default=5, metavar="N", help="lines per top list (default 5)"
    )
    r.add_argument(
        "--what-if",
        action="store_true",
        help="print what each fix would save per step instead of the summary (the run's "
        "replayed or predicted what-ifs, their combined saving and overlap)",
    )
    add_budget_args(r)
    r.set_defaults(handler=_run_report)


def _step_window(text: str) -> tuple[int, int | None]:
    a, sep, b = text.partition(":")
    try:
        start, stop = int(a), (int(b) if b else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not A:B or A: (step numbers): {text!r}") from None
    if not sep or start < 0 or (stop is not None and stop <= start):
        raise argparse.ArgumentTypeError(f"give A:B with 0 <= A < B, or A: ({text!r})")
    return start, stop


def _checkpoint(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value == 0 or 1 <= value <= 86_400):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or 1 to 86400 seconds, not {text}")
    return value


def _gpu_timeline(args: argparse.Namespace) -> tuple[Any, str]:
    if args.no_gpu_stats:
        return None, "off (--no-gpu-stats)"
    from gpuwatch.monitor.gpu_timeline import GpuTimeline
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend

    try:
        backend = open_backend()
    except NvmlUnavailable as exc:
        return None, f"unavailable: {exc}"
    return GpuTimeline(
        Sampler(backend, interval_s=args.gpu_interval), args.gpu_interval
    ).start(), "NVML"


def _target(args: argparse.Namespace) -> Any:
    from gpuwatch.profile.runner import Target, TargetError, check_target

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
    return target


def run_profile(args: argparse.Namespace) -> int:
    from gpuwatch.profile.run import ProfileOptions, run_profiled
    from gpuwatch.report.write import (
        check_outputs,
        distributed_rank,
        for_rank,
        output_for,
        outputs,
        streams_through,
        write_outputs,
        write_reports,
    )

    target = _target(args)
    if not args.quiet:
        from gpuwatch.profile.torch_range import check_installed

        untested = check_installed()
        if untested is not None:
            print(untested, file=sys.stderr)
    wanted = outputs(args.json_path, args.html_path, args.trace_path)
    wanted += [output_for(path) for path in args.output_paths]
    if args.nproc_per_node:
        from gpuwatch.profile.ranks import run_ranks

        budget_for(args)  # --budget is refused here; the ranks read the project's themselves

        check_outputs(wanted, inputs=[] if target.module else [target.name])
        return run_ranks(args, target, wanted)
    ranked = distributed_rank()
    if ranked is not None:  # each rank writes its own files; rank 0 prints the summary
        rank, world = ranked
        asked = wanted
        wanted = [for_rank(o, rank) for o in wanted]
        if rank != 0:
            args.quiet = True
        elif asked and not args.quiet and world > 1:
            others = ", ".join(for_rank(asked[0], k).path for k in range(1, min(world, 4)))
            more = ", ..." if world > 4 else ""
            print(
                f"gpuwatch: rank 0 of {world}: each rank writes its own reports ({others}{more}); "
                "merge them with gpuwatch report",
                file=sys.stderr,
            )
    check_outputs(wanted, inputs=[] if target.module else [target.name])
    if args.fake_gpus != 1 and not args.fake_cuda:
        raise CliError("--fake-gpus goes with --fake-cuda")
    check_gpu(args)
    if args.demo and not args.live:
        raise CliError("--demo goes with --live (it simulates the GPU cards)")
    options = ProfileOptions(
        kernel_timing=not args.no_kernel_timing,
        count_ops=args.count_ops,
        user_code=tuple(args.user_code) if args.user_code else None,
        timeline_capacity=args.timeline_capacity,
        trace_syncs=args.trace_syncs,
        checkpoint_s=args.checkpoint,
        fake_cuda=args.fake_gpus if args.fake_cuda else 0,
        steps=args.steps,
        gpu=args.gpu,
    )
    limits = budget_for(args)
    if args.fake_cuda:
        check_fake_cuda(args.fake_gpus)
    if args.live:
        return run_live(args, target, options, wanted, limits)
    timeline, gpu_stats = _gpu_timeline(args)
    failed = False
    final: Any = None

    def on_report(report: Any) -> None:
        nonlocal failed, final
        final = report
        failed = write_outputs(report, wanted, quiet=args.quiet)
        if not args.quiet:
            print_summary(report, args.top)
            if args.what_if:
                from gpuwatch.report.whatif import print_what_if

                print_what_if(report)

    # NB: checkpoints rewrite a file; a device or stream (/dev/stdout) gets the final report only.
    json_out = [o for o in wanted if o.kind == "json" and not streams_through(o.where)]

    def checkpoint(report: Any) -> None:
        write_reports(report, json_out)

    with fake_cuda_errors(options.fake_cuda):
        code = run_profiled(
            target,
            options,
            on_report,
            checkpoint=checkpoint if json_out else None,
            stop_gpu_timeline=timeline.stop if timeline is not None else None,
            gpu_stats=gpu_stats,
        )
    code = 2 if failed and code == 0 else code
    return check_run(limits, final, code, args.quiet)


def run_live(
    args: argparse.Namespace, target: Any, options: Any, wanted: list[Any], limits: Any = None
) -> int:
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend
    from gpuwatch.profile.live.app import LiveApp
    from gpuwatch.profile.live.session import ChildSession
    from gpuwatch.report.write import say

    sampler, reason = None, "off (--no-gpu-stats)"
    if not args.no_gpu_stats:
        try:
            sampler = Sampler(open_backend(demo=args.demo), interval_s=args.gpu_interval)
        except NvmlUnavailable as exc:
            reason = f"unavailable: {exc}"
    session = ChildSession(target, options, outputs=wanted)
    app = LiveApp(
        session,
        sampler,
        no_gpu_reason=reason,
        gpu_interval_s=args.gpu_interval,
        outputs=wanted,
        top=args.top,
    )
    result = app.run_guarded()
    if result.fatal is not None:
        raise CliError(result.fatal)
    failed = say(result.written, quiet=args.quiet)
    if result.report is not None and not args.quiet:
        print_summary(result.report, args.top)
        if args.what_if:
            from gpuwatch.report.whatif import print_what_if

            print_what_if(result.report)
    code = result.exit_code
    code = 2 if failed and code == 0 else code
    return check_run(limits, result.report, code, args.quiet)


def print_summary(report: Any, top: int, file: Any = None) -> None:
    from gpuwatch.report.text import print_summary as show

    show(report, top, file)


def _run_report(args: argparse.Namespace) -> int:
    from gpuwatch.cli.report import run_report

    return run_report(args)
