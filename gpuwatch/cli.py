"""The ``gpuwatch`` command line: argparse subcommands and a short ``main()`` that dispatches."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuwatch import __version__
from gpuwatch.cli_errors import CliError


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0.1:
        raise argparse.ArgumentTypeError("must be at least 0.1 seconds")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="Why is my GPU idle? Live GPU stats, and a profiler of the copies and "
        "synchronisations a PyTorch script makes.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    top = sub.add_parser(
        "top",
        help="live per-GPU stats and processes (NVML)",
        description="Live per-GPU utilisation, memory, temperature, power, clocks, PCIe/NVLink "
        "traffic and processes, from NVML.",
    )
    top.add_argument(
        "--demo", action="store_true", help="simulated GPUs instead of NVML (no GPU needed)"
    )
    top.add_argument(
        "--demo-gpus",
        type=_positive_int,
        default=2,
        metavar="N",
        help="how many GPUs --demo simulates (default 2)",
    )
    top.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="SECONDS",
        help="seconds between samples (default 1, at least 0.1)",
    )
    top.add_argument(
        "--readonly", action="store_true", help="never signal processes (the k key is off)"
    )
    mode = top.add_mutually_exclusive_group()
    mode.add_argument(
        "--once",
        action="store_true",
        help="print one plain-text table of GPUs and processes, then exit",
    )
    mode.add_argument(
        "--json", action="store_true", help="print one gpuwatch.snapshot/1 JSON document, then exit"
    )
    top.set_defaults(handler=run_top)

    from gpuwatch.profile_cmd import add_parsers

    add_parsers(sub, _positive_int, _interval)
    return parser


def run_top(args: argparse.Namespace) -> int:
    from gpuwatch.nvml import NvmlUnavailable, Sampler, open_backend

    try:
        backend = open_backend(demo=args.demo, demo_gpus=args.demo_gpus)
    except NvmlUnavailable as exc:
        raise CliError(str(exc), code=1) from None
    if args.once or args.json:
        from gpuwatch.report.snapshot import snapshot_json, snapshot_text

        sampler = Sampler(backend, background_pcie=False)
        try:
            snap = sampler.snapshot()
        finally:
            sampler.close()
        if args.json:
            print(snapshot_json(snap))
        else:
            sys.stdout.write(snapshot_text(snap, color=sys.stdout.isatty()))
        return 0
    from gpuwatch.app.top import TopApp

    TopApp(backend, interval_s=args.interval, readonly=args.readonly).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except CliError as exc:
        print(f"gpuwatch: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
