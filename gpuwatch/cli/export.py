"""``gpuwatch export``: its options, the sampling thread and the server's lifetime
(the metrics themselves are gpuwatch/monitor/export.py's collector)."""

from __future__ import annotations

import argparse
import signal
import socket
import threading
from collections.abc import Callable

from gpuwatch.argvalues import add_old_spelling, bounded_int, interval
from gpuwatch.errors import CliError
from gpuwatch.monitor.export import (
    CONNECTION_DEADLINE_S,
    IDLE_TIMEOUT_S,
    STALE_FLOOR_S,
    GpuCollector,
)
from gpuwatch.monitor.nvml.activity import IdlePolicy
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.threads import OwnThread


def declare(e: argparse.ArgumentParser) -> None:
    e.description = (
        "Serve per-GPU stats at /metrics in Prometheus' format, with dcgm-exporter's "
        "metric names and labels (its Grafana dashboards work unchanged), and per-process GPU "
        "memory and SM share as gpuwatch_process_* gauges."
    )
    e.add_argument("--port", type=bounded_int(1, 65535), default=9400, help="default 9400")
    e.add_argument(
        "--address",
        default="0.0.0.0",
        help="address to listen on (default 0.0.0.0; 127.0.0.1 when the scraper is local)",
    )
    e.add_argument(
        "-i",
        "--interval",
        type=interval,
        default=1.0,
        metavar="SECONDS",
        help="seconds between samples (default 1)",
    )
    add_demo_options(e, "simulated GPUs instead of NVML")
    e.add_argument("--no-processes", action="store_true", help="no per-process series at all")
    e.add_argument(
        "--process-users", action="store_true", help="add each process's user name as a label"
    )
    e.add_argument(
        "--process-jobs",
        action="store_true",
        help="add each process's job as labels: pod, namespace, container (Kubernetes, from its "
        "cgroup and environment) and hpc_job (SLURM's job id)",
    )
    add_idle_options(e)
    e.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate")
    e.add_argument("--keyfile", metavar="PEM", help="the certificate's private key")
    e.add_argument(
        "--client-timeout",
        type=interval,
        default=CONNECTION_DEADLINE_S,
        metavar="SECONDS",
        help="longest a client may take to send its request and read the answer, TLS handshake "
        f"included (default {CONNECTION_DEADLINE_S:g}); slower and idle clients are cut off",
    )
    e.add_argument(
        "--client-idle-timeout",
        type=interval,
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help="longest a client may leave the connection silent, before or during its request "
        f"or while its answer is sent (default {IDLE_TIMEOUT_S:g}; at most --client-timeout)",
    )
    e.set_defaults(handler=run_export)


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not between {low:g} and {high:g}")
        return value

    return parse


def add_demo_options(parser: argparse.ArgumentParser, demo_help: str) -> None:
    """``--demo`` and ``--fake-gpus N`` (NVML addresses at most 64 GPUs on a node), shared by
    ``top`` and ``export``."""
    parser.add_argument("--demo", action="store_true", help=demo_help)
    gpus = bounded_int(1, 64)
    parser.add_argument(
        "--fake-gpus",
        dest="demo_gpus",
        type=gpus,
        default=None,
        metavar="N",
        help="how many GPUs --demo simulates (default 2)",
    )
    # NB: a demo's option: no note (its old spelling stays silent, as scripts piping the
    # demo's JSON expect an empty stderr).
    add_old_spelling(parser, "--demo-gpus", "--fake-gpus", "demo_gpus", type=gpus, said=False)


def add_idle_options(parser: argparse.ArgumentParser) -> None:
    """``--idle-below`` and ``--idle-after``, shared by ``top`` and ``export``."""
    d = IdlePolicy()
    parser.add_argument(
        "--idle-below",
        type=bounded_float(0, 100),
        default=d.below_pct,
        metavar="PCT",
        help="a GPU is idle under this SM activity (utilisation without GPM) "
        f"(default {d.below_pct:g})",
    )
    parser.add_argument(
        "--idle-after",
        type=bounded_float(0, 7 * 86400),
        default=d.after_s,
        metavar="SECONDS",
        help=f"a GPU held by processes and idle this long is HELD IDLE (default {d.after_s:g})",
    )


def idle_policy(args: argparse.Namespace) -> IdlePolicy:
    return IdlePolicy(below_pct=args.idle_below, after_s=args.idle_after)


def _sample_forever(
    sampler: Sampler, collector: GpuCollector, interval_s: float, stop: threading.Event
) -> None:
    """The sampling loop, on its own daemon thread: an NVML call that hangs here leaves the main
    thread free to answer SIGTERM, and scrapes see the series go stale instead of a hang."""
    last_error = None
    while True:
        try:
            collector.snapshot = sampler.snapshot()
            last_error = None
        except Exception as exc:  # a failed sample keeps the last one, until it goes stale
            if str(exc) != last_error:
                print(f"gpuwatch export: sampling failed: {exc}", flush=True)
            last_error = str(exc)
        if stop.wait(interval_s):
            return


def _close_within(close: Callable[[], object], timeout_s: float) -> None:
    """Runs ``close`` on a daemon thread and waits at most ``timeout_s`` (NVML's shutdown can hang
    like any other NVML call; the process exits regardless)."""
    closer = OwnThread(target=close, name="gpuwatch-export-close", daemon=True)
    closer.start()
    closer.join(timeout_s)


def run_export(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from gpuwatch.monitor.export_server import MetricsServer, tls_context
    from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler, open_backend

    if args.demo_gpus is not None and not args.demo:
        raise CliError("--fake-gpus goes with --demo")
    if bool(args.certfile) != bool(args.keyfile):
        raise CliError("--certfile and --keyfile go together")
    tls = None
    if args.certfile:
        try:
            tls = tls_context(args.certfile, args.keyfile)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise CliError(f"cannot use {args.certfile} / {args.keyfile}: {exc}") from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, lambda *_: stop.set())
    try:
        backend = open_backend(demo=args.demo, demo_gpus=args.demo_gpus or 2)
    except NvmlUnavailable as exc:
        raise CliError(f"{exc} (--demo serves simulated GPUs)", code=1) from None
    sampler = Sampler(backend, interval_s=args.interval, idle=idle_policy(args))
    # NB: a sample older than three intervals withdraws its series; never under 2 s (an NVML
    # call may take a second on a busy node).
    stale_s = max(STALE_FLOOR_S, 3 * args.interval)
    collector = GpuCollector(
        socket.gethostname(),
        processes=not args.no_processes,
        users=args.process_users,
        stale_after_s=stale_s,
        jobs=args.process_jobs,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server = MetricsServer(
            args.address,
            args.port,
            registry,
            tls=tls,
            deadline_s=args.client_timeout,
            idle_s=args.client_idle_timeout,
        )
    except OSError as exc:
        _close_within(sampler.close, 1.0)
        raise CliError(
            f"cannot serve on {args.address}:{args.port}: {exc.strerror or exc}"
        ) from None
    server.start()
    OwnThread(
        target=_sample_forever,
        args=(sampler, collector, args.interval, stop),
        name="gpuwatch-export-sampling",
        daemon=True,
    ).start()
    scheme = "https" if tls else "http"
    print(
        f"gpuwatch export: {sampler.gpu_count} GPU(s) ({sampler.source}) at "
        f"{scheme}://{args.address}:{args.port}/metrics, every {args.interval:g} s",
        flush=True,
    )
    was_stale = False
    try:
        # The main thread only waits for a signal and says when the samples go stale or fresh.
        while not stop.wait(min(args.interval, 0.5)):
            if collector.stale != was_stale:
                was_stale = collector.stale
                print(
                    f"gpuwatch export: no sample for over {stale_s:g} s (NVML is not answering): "
                    "the GPU series are withdrawn until it does"
                    if was_stale
                    else "gpuwatch export: sampling answers again: the GPU series are back",
                    flush=True,
                )
    finally:
        server.close()
        _close_within(sampler.close, 2.0)
    return 0
