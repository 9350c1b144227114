"""``gpuwatch top``: live per-GPU stats and processes (NVML), a one-shot table or snapshot
JSON (``--once``/``--json``), local GPUs and other hosts' (``--remote``)."""

from __future__ import annotations

import argparse
import sys

from gpuwatch.argvalues import interval
from gpuwatch.cli.export import add_demo_options, add_idle_options, idle_policy
from gpuwatch.errors import CliError
from gpuwatch.monitor.nvml.backend import Backend


def declare(top: argparse.ArgumentParser) -> None:
    top.description = (
        "Live per-GPU utilisation, memory, temperature, power, clocks, PCIe/NVLink "
        "traffic and processes, from NVML."
    )
    add_demo_options(top, "simulated GPUs instead of NVML (no GPU needed)")
    top.add_argument(
        "-i",
        "--interval",
        type=interval,
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
    top.add_argument(
        "--only",
        nargs="+",
        metavar="INDEX",
        help="only these GPUs (NVML indices: --only 0 2; 0,2 works too)",
    )
    top.add_argument(
        "--only-visible",
        action="store_true",
        help="only the GPUs CUDA_VISIBLE_DEVICES shows CUDA (indices, UUIDs, MIG identifiers)",
    )
    top.add_argument(
        "-u",
        "--user",
        action="append",
        default=[],
        metavar="NAME",
        help="only this user's processes (repeatable)",
    )
    top.add_argument(
        "-p",
        "--pid",
        action="append",
        default=[],
        type=int,
        metavar="PID",
        help="only this process (repeatable)",
    )
    top.add_argument("-c", "--compute", action="store_true", help="only compute processes")
    add_idle_options(top)
    mode = top.add_mutually_exclusive_group()
    mode.add_argument(
        "-1",
        "--once",
        action="store_true",
        help="print one plain-text table of GPUs and processes, then exit",
    )
    mode.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="one gpuwatch.snapshot/1 JSON document, then exit: printed, or written to PATH",
    )
    top.set_defaults(handler=run_top)


def _remote_backend(
    args: argparse.Namespace, local: Backend | None, local_problem: str | None
) -> Backend:
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


def _chosen(args: argparse.Namespace, backend: Backend) -> Backend:
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
            indices = parse_only(",".join(args.only), backend.device_count())
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
    from gpuwatch.monitor.nvml.remote import HostsBackend, checked_url

    if args.remote_only and not args.remote:
        raise CliError("--remote-only goes with --remote URL")
    for url in args.remote:  # NB: before anything is opened or fetched
        try:
            checked_url(url)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if args.demo_gpus is not None and not args.demo:
        raise CliError("--fake-gpus goes with --demo")
    local_problem = None
    try:
        backend = (
            None
            if args.remote_only
            else open_backend(demo=args.demo, demo_gpus=args.demo_gpus or 2)
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

    if args.once or args.json:
        from gpuwatch.output.snapshot import measured_snapshot, snapshot_json, snapshot_text

        sampler = Sampler(backend, background_pcie=False, idle=idle_policy(args))
        try:
            snap = measured_snapshot(sampler)
            nobody = backend.all_unreachable() if isinstance(backend, HostsBackend) else None
        finally:
            sampler.close()
        if nobody:
            raise CliError(f"no GPUs to show: no remote host answered ({nobody})", code=1)
        if args.json not in (None, "-"):
            from profilers.text import write_text_atomic

            try:
                write_text_atomic(args.json, snapshot_json(snap) + "\n")
            except OSError as exc:
                raise CliError(f"cannot write {args.json}: {exc.strerror or exc}") from None
        elif args.json:
            print(snapshot_json(snap))
            sys.stdout.flush()  # NB: a closed pipe raises here, inside main(), not at exit
        else:
            import shutil

            # NB: the terminal's width (COLUMNS first), 200 columns into a pipe or a file.
            width = shutil.get_terminal_size((200, 24)).columns
            sys.stdout.write(snapshot_text(snap, width=width, color=sys.stdout.isatty()))
            sys.stdout.flush()
        return 0
    from gpuwatch.ui.signals import run_restoring_signals
    from gpuwatch.ui.top.app import TopApp

    app = TopApp(backend, interval_s=args.interval, readonly=args.readonly, idle=idle_policy(args))
    run_restoring_signals(app)
    return 0 if app.signalled is None else 128 + app.signalled
