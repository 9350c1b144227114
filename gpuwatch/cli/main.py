"""The ``gpuwatch`` command line: argparse subcommands and a short ``main()`` that dispatches."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gpuwatch import __version__
from gpuwatch.errors import CliError
from gpuwatch.profile.interrupts import Terminated

#: The longest sampling interval accepted: an hour (inf or nan is a typo, not a wish).
MAX_INTERVAL_S = 3600.0


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.1 <= value <= MAX_INTERVAL_S:  # NB: also false for nan
        raise argparse.ArgumentTypeError(
            f"must be between 0.1 and {MAX_INTERVAL_S:.0f} seconds, not {text}"
        )
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:,} to {high:,}, not {value:,}")
        return value

    return parse


#: NVML addresses at most 64 devices on a node (NVML_MAX_DEVICES is smaller still in practice).
MAX_DEMO_GPUS = 64


def build_parser() -> argparse.ArgumentParser:
    # NB: allow_abbrev=False everywhere: a prefix must never pick another option silently
    # (--trace was taken as --trace-syncs).
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        allow_abbrev=False,
        description="Why is my GPU idle? Live GPU stats, and a profiler of the copies and "
        "synchronisations a PyTorch script makes.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    top = sub.add_parser(
        "top",
        allow_abbrev=False,
        help="live per-GPU stats and processes (NVML)",
        description="Live per-GPU utilisation, memory, temperature, power, clocks, PCIe/NVLink "
        "traffic and processes, from NVML.",
    )
    top.add_argument(
        "--demo", action="store_true", help="simulated GPUs instead of NVML (no GPU needed)"
    )
    top.add_argument(
        "--demo-gpus",
        type=bounded_int(1, MAX_DEMO_GPUS),
        default=None,
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
    top.add_argument(
        "--remote",
        action="append",
        default=[],
        metavar="URL",
        help="also show the GPUs of another host, from its /metrics (gpuwatch export or "
        "dcgm-exporter), e.g. http://node-a:9400 (repeatable)",
    )
    top.add_argument("--remote-only", action="store_true", help="with --remote: not the local GPUs")
    top.add_argument("--only", metavar="0,2", help="only these GPUs (NVML indices)")
    top.add_argument(
        "--only-visible",
        action="store_true",
        help="only the GPUs CUDA_VISIBLE_DEVICES shows CUDA (indices, UUIDs, MIG identifiers)",
    )
    top.add_argument(
        "--user", action="append", default=[], metavar="NAME", help="only this user's processes"
    )
    top.add_argument(
        "--pid", action="append", default=[], type=int, metavar="PID", help="only this process"
    )
    top.add_argument("--compute", action="store_true", help="only compute processes")
    from gpuwatch.monitor.export_cmd import add_idle_options

    add_idle_options(top)
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

    from gpuwatch.cli.diff import add_parser as add_diff
    from gpuwatch.monitor.export_cmd import add_parser as add_export
    from gpuwatch.profile.command import add_parsers

    add_parsers(sub, bounded_int, _interval)
    add_diff(sub, bounded_int)
    add_export(sub, bounded_int, _interval)
    return parser


def _remote_backend(args: argparse.Namespace, local: Any, local_problem: str | None) -> Any:
    import time

    from gpuwatch.monitor.nvml.remote import TIMEOUT_S, HostsBackend, RemoteHost

    hosts: list[RemoteHost] = []
    try:
        for url in args.remote:
            hosts.append(RemoteHost(url, args.interval, wait=False))
    except ValueError as exc:
        for h in hosts:
            h.close()
        raise CliError(str(exc)) from None
    # NB: every host's first fetch runs at once, all within one deadline (each fetch is bounded
    # as a whole, headers included): startup waits TIMEOUT_S at most, however many hosts drip.
    deadline = time.monotonic() + TIMEOUT_S + 0.5
    for h in hosts:
        h.wait_first(deadline - time.monotonic())
    return HostsBackend(hosts, local, local_problem)


def _chosen(args: argparse.Namespace, backend: Any) -> Any:
    """The local backend narrowed to --only/--only-visible GPUs and the process filters."""
    from gpuwatch.monitor.nvml.chosen import (
        ChoiceError,
        ChosenBackend,
        ProcessFilter,
        parse_only,
        visible_indices,
    )

    if args.only and args.only_visible:
        raise CliError("--only and --only-visible: choose one")
    procs = ProcessFilter(tuple(args.user), tuple(args.pid), args.compute)
    if not (args.only or args.only_visible or procs.active):
        return backend
    try:
        if args.only:
            indices = parse_only(args.only, backend.device_count())
        elif args.only_visible:
            indices = visible_indices(backend)
        else:
            indices = list(range(backend.device_count()))
    except ChoiceError as exc:
        backend.close()
        raise CliError(str(exc)) from None
    return ChosenBackend(backend, indices, procs)


def run_top(args: argparse.Namespace) -> int:
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend

    if args.remote_only and not args.remote:
        raise CliError("--remote-only goes with --remote URL")
    if args.demo_gpus is not None and not args.demo:
        raise CliError("--demo-gpus goes with --demo")
    args.demo_gpus = args.demo_gpus or 2
    local_problem = None
    try:
        backend = (
            None if args.remote_only else open_backend(demo=args.demo, demo_gpus=args.demo_gpus)
        )
    except NvmlUnavailable as exc:
        if not args.remote:
            hint = "" if args.demo else " (--demo shows simulated GPUs)"
            raise CliError(f"{exc}{hint}", code=1) from None
        backend = None  # no local GPUs here: the remote hosts only, and the user is told
        local_problem = f"no local GPUs ({exc}): showing the remote hosts only"
    if backend is not None:
        backend = _chosen(args, backend)
    if args.remote:
        backend = _remote_backend(args, backend, local_problem)
    assert backend is not None  # no local GPUs is an error above unless --remote
    from gpuwatch.monitor.export_cmd import idle_policy

    if args.once or args.json:
        from gpuwatch.report.snapshot import measured_snapshot, snapshot_json, snapshot_text

        sampler = Sampler(backend, background_pcie=False, idle=idle_policy(args))
        try:
            snap = measured_snapshot(sampler)
            nobody = backend.all_unreachable() if args.remote else None
        finally:
            sampler.close()
        if nobody:
            raise CliError(f"no GPUs to show: no remote host answered ({nobody})", code=1)
        if args.json:
            print(snapshot_json(snap))
            sys.stdout.flush()  # NB: a closed pipe raises here, inside main(), not at exit
        else:
            import shutil

            # NB: the terminal's width (COLUMNS first), 200 columns into a pipe or a file.
            width = shutil.get_terminal_size((200, 24)).columns
            sys.stdout.write(snapshot_text(snap, width=width, color=sys.stdout.isatty()))
            sys.stdout.flush()
        return 0
    from gpuwatch.app.signals import run_restoring_signals
    from gpuwatch.monitor.top import TopApp

    app = TopApp(backend, interval_s=args.interval, readonly=args.readonly, idle=idle_policy(args))
    run_restoring_signals(app)
    return 0 if app.signalled is None else 128 + app.signalled


def main(argv: Sequence[str] | None = None) -> int:
    from gpuwatch.cli.target_args import split_target

    parser = build_parser()
    ours, target = split_target(parser, list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(ours)
    if target is not None:  # everything after the script or module is the script's
        args.args = target
    try:
        return int(args.handler(args))
    except CliError as exc:
        print(f"gpuwatch: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except Terminated as exc:  # SIGTERM/SIGHUP before the script started
        return exc.exit_code
    except BrokenPipeError:  # `gpuwatch top --json | head`: the reader is gone
        return _pipe_closed()


def _pipe_closed() -> int:
    """Ends quietly, as ``cat`` does when its reader goes: no traceback, and no second error
    when Python flushes stdout at exit (it now writes to /dev/null)."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE
