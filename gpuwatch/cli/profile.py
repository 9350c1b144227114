"""``gpuwatch profile``: run a script under the profiler (here, as ranks, or live) and write
its reports."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import TYPE_CHECKING

from gpuwatch.argvalues import note
from gpuwatch.errors import CliError
from gpuwatch.profile.budget import budget_for, check_run
from gpuwatch.profile.options import ProfileOptions, add_arguments
from gpuwatch.profile.worded import library_errors

if TYPE_CHECKING:
    from gpuwatch.monitor.gpu_timeline import GpuTimeline
    from gpuwatch.output.write import Output
    from gpuwatch.profile.runner import Target
    from profilers.budgets import Budget
    from profilers.report import Report


def declare(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run a Python script (or -m module) under gpuwatch's profiler: every "
        "host->GPU, GPU->host and GPU->GPU copy, every host/GPU synchronisation and the kernel "
        "time of every op, charged to your own source lines. The summary goes to stderr; the "
        "script's own output is left alone."
    )
    p.usage = "gpuwatch profile [options] (script.py | -m module) [args ...]"
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    add_arguments(p)
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="script.py [args ...]",
        help="the script and its arguments",
    )
    p.set_defaults(handler=run_profile)


def _gpu_timeline(options: ProfileOptions) -> tuple[GpuTimeline | None, str]:
    if not options.gpu_stats:
        return None, "off (--no-gpu-stats)"
    from gpuwatch.monitor.gpu_timeline import GpuTimeline
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend

    try:
        backend = open_backend()
    except NvmlUnavailable as exc:
        return None, f"unavailable: {exc}"
    interval_s = options.gpu_interval_s
    return GpuTimeline(Sampler(backend, interval_s=interval_s), interval_s).start(), "NVML"


def _target(args: argparse.Namespace) -> Target:
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


def _check_inputs(options: ProfileOptions, target: Target) -> None:
    """``--input`` naming the script's own module would import (run) the script a second time
    before it starts: refused, pointing at ``profilers.input()``."""
    stem = None if target.module else os.path.splitext(os.path.basename(target.name))[0]
    for name in options.inputs:
        if name.replace(":", ".").split(".")[0] == stem:
            raise CliError(
                f"--input {name} names the script itself, which has not run yet: mark it there "
                "with profilers.input()"
            )


def run_profile(args: argparse.Namespace) -> int:
    try:
        target = _target(args)
    except SyntaxError as exc:  # alone, as `python script.py` shows it: no report, exit 1
        print("".join(traceback.format_exception_only(exc)), end="", file=sys.stderr)
        return 1
    return profile(ProfileOptions.from_namespace(args), target)


def _checked_gpu(options: ProfileOptions) -> ProfileOptions:
    """``--gpu NAME``: a GPU the model knows (its canonical name kept), and only where the GPU
    is simulated: a real run is measured, and predicting another GPU from it would mix
    measured and predicted figures."""
    if options.gpu is None:
        return options
    if not options.fake_cuda:
        raise CliError(
            "--gpu predicts a named GPU under --fake-cuda; a run on this machine's GPUs is "
            "measured, not predicted (add --fake-cuda to predict for another GPU)"
        )
    if options.steps is not None:
        raise CliError("--gpu replays whole steps: it does not go with --steps")
    from profilers.timing.gpu_model.specs import UnknownGpuError, gpu_spec

    try:
        return options.replace(gpu=gpu_spec(options.gpu).name)
    except UnknownGpuError as exc:
        raise CliError(str(exc)) from None


def _check_options(options: ProfileOptions) -> None:
    """Options that only mean something together: one line, before anything runs."""
    if options.fake_gpus != 1 and not options.fake_cuda:
        raise CliError("--fake-gpus goes with --fake-cuda")
    if options.fake_memory_bytes is not None and not options.fake_cuda:
        raise CliError("--fake-memory goes with --fake-cuda")
    if options.fake_values is not None and not options.fake_cuda:
        raise CliError("--fake-values goes with --fake-cuda")
    if options.demo and not options.live:
        raise CliError("--demo goes with --live (it simulates the GPU cards)")
    if options.count_ops and options.kernel_timing and not options.quiet:
        note(
            "--count-ops changes nothing without --no-kernel-timing (kernel timing counts every op)"
        )


def profile(options: ProfileOptions, target: Target) -> int:
    """``gpuwatch profile``: runs ``target`` under ``options`` (here, as ranks, or live)."""
    try:
        from gpuwatch.profile.run import run_profiled
    except (ImportError, AttributeError) as exc:  # NB: a torch that moved a name we import
        from gpuwatch.profile.torch_range import cannot_load

        raise CliError(cannot_load(exc)) from None
    from gpuwatch.output.deliver import deliver
    from gpuwatch.output.write import (
        Output,
        check_outputs,
        for_rank,
        output_for,
        outputs,
        streams_through,
        write_reports,
    )

    wanted = outputs(options.json_path, options.html_path, options.trace_path)
    wanted += [output_for(path) for path in options.output_paths]
    _check_options(options)
    _check_inputs(options, target)
    options = _checked_gpu(options)
    if not options.quiet:  # NB: after the option checks: a usage error stays one line
        from gpuwatch.profile.torch_range import check_installed

        untested = check_installed()
        if untested is not None:
            print(untested, file=sys.stderr)
    if options.nproc_per_node:
        from gpuwatch.profile.ranks import run_ranks

        # --budget is refused here; the ranks read the project's themselves
        budget_for(options.budget, options.no_budget, ranks=options.nproc_per_node)

        check_outputs(wanted, inputs=[] if target.module else [target.name])
        return run_ranks(options, target, wanted)
    from gpuwatch.profile.ranks import distributed_rank, run_folder, summary_of_all

    ranked = distributed_rank()
    merge_from: list[Output] = []  # each rank's JSON, merged by the last rank to end
    if ranked is not None:  # each rank writes its own files
        rank, world = ranked
        if world > 1 and not any(o.kind == "json" for o in wanted):
            folder = run_folder(rank)  # NB: no rank's work is lost for want of an output
            wanted += [Output("json", os.path.join(folder, "rank{rank}.json"))] if folder else []
        asked, wanted = wanted, [for_rank(o, rank) for o in wanted]
        json = next((o for o in asked if o.kind == "json"), None)
        one_node = os.environ.get("LOCAL_WORLD_SIZE") == str(world)  # all ranks here
        if world > 1 and one_node and not options.quiet and json is not None:
            merge_from = [for_rank(json, k) for k in range(world)]
        if rank != 0 or merge_from:
            options = options.replace(quiet=True)
        if rank == 0 and asked and world > 1 and (merge_from or not options.quiet):
            others = ", ".join(for_rank(asked[0], k).path for k in range(1, min(world, 4)))
            more = ", ..." if world > 4 else ""
            then = "the last to end prints all ranks' summary" if merge_from else "merge them"
            print(
                f"gpuwatch: rank 0 of {world}: each rank writes its own reports ({others}{more}); "
                + (then if merge_from else f"{then} with gpuwatch report"),
                file=sys.stderr,
            )
    check_outputs(wanted, inputs=[] if target.module else [target.name])
    limits = budget_for(options.budget, options.no_budget)
    if options.fake_cuda:
        # NB: the fake GPU's C++ half is built (once per torch) and tried before the script
        # starts: what stops it is one line and exit 2, not an error inside the run (or the child).
        from profilers.fake_cuda.harness import check_fake_cuda

        with library_errors():
            check_fake_cuda(options.fake_gpus)
    if options.live:
        return run_live(options, target, wanted, limits)
    timeline, gpu_stats = _gpu_timeline(options)
    failed = False
    final: Report | None = None
    quiet = options.quiet

    def on_report(report: Report) -> None:
        nonlocal failed, final
        final = report
        failed = deliver(report, wanted, top=options.top, quiet=quiet, what_if=options.what_if)
        if merge_from:
            summary_of_all(merge_from, rank, options)

    # NB: checkpoints rewrite a file; a device or stream (/dev/stdout) gets the final report only.
    json_out = [o for o in wanted if o.kind == "json" and not streams_through(o.where)]

    def checkpoint(report: Report) -> None:
        write_reports(report, json_out)

    with library_errors():  # the profile (or its fake GPU) could not start: one line
        code = run_profiled(
            target,
            options,
            on_report,
            checkpoint=checkpoint if json_out else None,
            stop_gpu_timeline=timeline.stop if timeline is not None else None,
            gpu_stats=gpu_stats,
        )
    code = 2 if failed and code == 0 else code
    return check_run(limits, final, code, quiet)


def run_live(
    options: ProfileOptions, target: Target, wanted: list[Output], limits: Budget | None = None
) -> int:
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend
    from gpuwatch.output.deliver import deliver
    from gpuwatch.output.write import say
    from gpuwatch.profile.live.model import LiveRun
    from gpuwatch.profile.live.session import ChildSession
    from gpuwatch.ui.live.app import LiveApp

    sampler, reason = None, "off (--no-gpu-stats)"
    if options.gpu_stats:
        try:
            sampler = Sampler(open_backend(demo=options.demo), interval_s=options.gpu_interval_s)
        except NvmlUnavailable as exc:
            reason = f"unavailable: {exc}"
    session = ChildSession(target, options, outputs=wanted)
    run = LiveRun(session, wanted, gpu_stats=sampler.source if sampler is not None else reason)
    app = LiveApp(
        run, sampler, no_gpu_reason=reason, gpu_interval_s=options.gpu_interval_s, top=options.top
    )
    result = app.run_guarded()
    if result.fatal is not None:
        raise CliError(result.fatal)
    failed = say(result.written, quiet=options.quiet)
    if result.report is not None:  # NB: its files are written: by the view, as the run ended
        deliver(
            result.report,
            [],
            top=options.top,
            quiet=options.quiet,
            what_if=options.what_if,
            findings=result.findings,
        )
    code = 2 if failed and result.exit_code == 0 else result.exit_code
    return check_run(limits, result.report, code, options.quiet)
