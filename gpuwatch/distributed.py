"""``gpuwatch profile --nproc-per-node N``: launch the ranks with PyTorch's own launcher
(``torch.distributed.run --standalone``), each rank profiled by ``gpuwatch profile`` and writing its
own JSON, then one merged report in the paths the user gave and one summary for all ranks."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuwatch.cli_errors import CliError


def rank_command(args: argparse.Namespace, target: Any, json_pattern: str) -> list[str]:
    """What each rank runs: ``gpuwatch profile`` with the user's options, quiet, its JSON at
    ``json_pattern`` (``{rank}`` replaced by the rank)."""
    cmd = ["-m", "gpuwatch", "profile", "-q", "--json", json_pattern]
    if args.no_kernel_timing:
        cmd.append("--no-kernel-timing")
    if args.count_ops:
        cmd.append("--count-ops")
    for d in args.user_code or []:
        cmd += ["--user-code", d]
    cmd += ["--timeline-capacity", str(args.timeline_capacity)]
    cmd += ["--checkpoint", str(args.checkpoint), "--gpu-interval", str(args.gpu_interval)]
    if args.no_gpu_stats:
        cmd.append("--no-gpu-stats")
    if args.trace_syncs:
        cmd.append("--trace-syncs")
    if args.fake_cuda:
        cmd += ["--fake-cuda", "--fake-gpus", str(args.fake_gpus)]
    if args.steps is not None:
        a, b = args.steps
        cmd += ["--steps", f"{a}:{'' if b is None else b}"]
    if target.module:
        cmd += ["-m", target.name]
    else:
        cmd.append(target.name)
    return cmd + list(target.args)


def run_ranks(args: argparse.Namespace, target: Any, wanted: list[Any]) -> int:
    from gpuwatch.report.load import load_report
    from gpuwatch.report.text import print_summary
    from gpuwatch.report.write import write_outputs
    from profilers.merge import merge_ranks

    if args.live:
        raise CliError("--nproc-per-node does not go with --live (one screen per rank)")
    n = args.nproc_per_node
    tmp = Path(tempfile.mkdtemp(prefix="gpuwatch-ranks-"))
    try:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(n),
            *rank_command(args, target, str(tmp / "rank{rank}.json")),
        ]
        try:
            code = subprocess.run(launcher, check=False).returncode
        except KeyboardInterrupt:  # the launcher got the same Ctrl-C and stops its ranks
            code = 130
        found = [tmp / f"rank{k}.json" for k in range(n) if (tmp / f"rank{k}.json").exists()]
        if not found:
            raise CliError(
                f"no rank left a report (torch.distributed.run exited with {code}); "
                "see the ranks' output above"
            )
        merged = merge_ranks([load_report(str(p)) for p in found])
        merged.world_size = n
        merged.missing_ranks = [k for k in range(n) if k not in (merged.ranks or [])] or None
        failed = write_outputs(merged, wanted, quiet=args.quiet)
        if not args.quiet:
            print_summary(merged, args.top)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    code = code if code >= 0 else 128 - code  # a signal the launcher died of
    return 2 if failed and code == 0 else code
