"""``gpuwatch export``: the GPUs' stats for Prometheus, named as dcgm-exporter names them.

A sampling thread takes a snapshot every ``--interval`` seconds; a scrape only reads the latest
one (it never waits on NVML). Metrics are built with ``prometheus_client``'s metric families in a
registry of their own (no exposition format written by hand). Values NVML does not report are
left out, never sent as 0. What a process says about itself is kept to what a dashboard needs: its
short name, never its arguments; its user only with ``--process-users``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuwatch.cli_errors import CliError
from gpuwatch.nvml.samples import GpuSample, Snapshot

MIB = 1024 * 1024
#: How long one scrape's connection may take, accept to last byte (TLS handshake, request,
#: answer): Prometheus' own scrape timeout is 10 s by default.
CONNECTION_DEADLINE_S = 10.0
#: The shortest staleness limit (see :func:`_stale_after_s`).
STALE_FLOOR_S = 2.0


@dataclass(frozen=True)
class Metric:
    """One dcgm-exporter gauge: its name, help text and the value of a GPU sample (None: left
    out)."""

    name: str
    help: str
    value: Callable[[GpuSample], float | None]


def _div(x: float | None, by: float) -> float | None:
    return None if x is None else x / by


def _sum(*xs: float | None) -> float | None:
    return None if any(x is None for x in xs) else float(sum(x for x in xs if x is not None))


#: dcgm-exporter's names (etc/default-counters.csv) and units; README says which match exactly.
GPU_METRICS = (
    Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.gpu_util_pct),
    Metric("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    Metric(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda g: _div(g.memory_used_bytes, MIB),
    ),
    Metric(
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: _div(
            None
            if g.memory_total_bytes is None or g.memory_used_bytes is None
            else g.memory_total_bytes - g.memory_used_bytes,
            MIB,
        ),
    ),
    Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    Metric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    Metric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    Metric("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz),
    Metric("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda g: g.encoder_util_pct),
    Metric("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda g: g.decoder_util_pct),
    Metric(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe TX throughput (in KB/s) via NVML.",
        lambda g: _div(g.pcie_tx_bytes_per_s, 1024),
    ),
    Metric(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe RX throughput (in KB/s) via NVML.",
        lambda g: _div(g.pcie_rx_bytes_per_s, 1024),
    ),
    Metric(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "NVLink bandwidth of all links, TX and RX (in KB/s).",
        lambda g: _div(_sum(g.nvlink_tx_bytes_per_s, g.nvlink_rx_bytes_per_s), 1024),
    ),
    Metric(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (NVML's bitmask).",
        lambda g: g.throttle_reasons,
    ),
)


class GpuCollector:
    """Yields the latest snapshot's metrics on every scrape (``registry.register(self)``)."""

    def __init__(
        self,
        hostname: str,
        processes: bool = True,
        users: bool = False,
        stale_after_s: float | None = None,
    ) -> None:
        self.hostname = hostname
        self.processes = processes
        self.users = users
        self.stale_after_s = stale_after_s
        """Withdraw the GPU series once the latest sample is older than this (None: never)."""
        self._snapshot: Snapshot | None = None
        self._taken: float | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest sample; setting it stamps the time it was taken."""
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snap: Snapshot | None) -> None:
        self._snapshot, self._taken = snap, time.monotonic()

    def sample_age_s(self) -> float | None:
        """Seconds since the latest sample (None: none yet)."""
        return None if self._taken is None else time.monotonic() - self._taken

    @property
    def stale(self) -> bool:
        age = self.sample_age_s()
        return self.stale_after_s is not None and age is not None and age > self.stale_after_s

    def describe(self) -> list[Any]:
        return []  # families are built per scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        snap = self.snapshot
        age = GaugeMetricFamily(
            "gpuwatch_sample_age_seconds",
            "Seconds since the GPUs were last sampled; every GPU and process series is withdrawn "
            "while this is over the staleness limit (NVML not answering).",
            labels=["Hostname"],
        )
        age_s = self.sample_age_s()
        if age_s is not None and snap is not None:
            age.add_metric([self.hostname], round(age_s, 3))
        yield age
        # NB: stale figures are withdrawn, not served: a dashboard then shows a gap (and an
        # alert on absent() fires) instead of a GPU frozen at its last value.
        if snap is None or self.stale:
            return
        labels = ["gpu", "UUID", "device", "modelName", "pci_bus_id", "Hostname"]
        gpus = [g for g in snap.gpus if not g.lost]
        for m in GPU_METRICS:
            fam = GaugeMetricFamily(m.name, m.help, labels=labels)
            for g in gpus:
                value = m.value(g)
                if value is not None:
                    fam.add_metric(self._gpu_labels(g), float(value))
            yield fam
        if not self.processes:
            return
        plabels = ["gpu", "UUID", "pid", "command", "Hostname"] + (["user"] if self.users else [])
        mem = GaugeMetricFamily(
            "gpuwatch_process_gpu_memory_bytes",
            "GPU memory a process uses on a GPU (in bytes).",
            labels=plabels,
        )
        sm = GaugeMetricFamily(
            "gpuwatch_process_sm_util_percent",
            "A process's share of a GPU's SM time over the last sample (in %).",
            labels=plabels,
        )
        for g in gpus:
            for p in g.processes:
                values = [str(g.index), g.uuid or "", str(p.pid), _short(p.name), self.hostname]
                if self.users:
                    values.append(p.user or "")
                if p.gpu_memory_bytes is not None:
                    mem.add_metric(values, float(p.gpu_memory_bytes))
                if p.sm_util_pct is not None:
                    sm.add_metric(values, float(p.sm_util_pct))
        yield mem
        yield sm

    def _gpu_labels(self, g: GpuSample) -> list[str]:
        return [
            str(g.index),
            g.uuid or "",
            f"nvidia{g.index}",
            g.name or "",
            g.pci_bus_id or "",
            self.hostname,
        ]


def _short(name: str | None) -> str:
    """A process's short name, bounded: never its arguments.

    NB: psutil's ``name()`` is argv[0] when the executable's name is 15 characters or more and
    argv[0] starts with it, and argv[0] can carry anything (``exec -a "worker --api-token=S"``):
    only what comes before the first whitespace is kept, then its last path component.
    """
    first = (name or "").split(maxsplit=1)[0] if (name or "").strip() else ""
    return (os.path.basename(first) or "?")[:64]


def add_parser(sub: Any, bounded_int: Any, interval: Any) -> None:
    e = sub.add_parser(
        "export",
        allow_abbrev=False,
        help="serve the GPUs' stats to Prometheus (dcgm-exporter's metric names)",
        description="Serve per-GPU stats at /metrics in Prometheus' format, with dcgm-exporter's "
        "metric names and labels (its Grafana dashboards work unchanged), and per-process GPU "
        "memory and SM share as gpuwatch_process_* gauges.",
    )
    e.add_argument("--port", type=bounded_int(1, 65535), default=9400, help="default 9400")
    e.add_argument(
        "--address",
        default="0.0.0.0",
        help="address to listen on (default 0.0.0.0; 127.0.0.1 when the scraper is local)",
    )
    e.add_argument(
        "--interval", type=interval, default=1.0, metavar="SECONDS", help="sampling (default 1)"
    )
    e.add_argument("--demo", action="store_true", help="simulated GPUs instead of NVML")
    e.add_argument("--demo-gpus", type=bounded_int(1, 64), default=None, metavar="N")
    e.add_argument("--no-processes", action="store_true", help="no per-process series at all")
    e.add_argument(
        "--process-users", action="store_true", help="add each process's user name as a label"
    )
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
    e.set_defaults(handler=run_export)


def _stale_after_s(interval_s: float) -> float:
    """How old the latest sample may be before its series are withdrawn: three missed samples,
    and never less than 2 s (an NVML call may take a second on a busy node)."""
    return max(STALE_FLOOR_S, 3 * interval_s)


def _sample_forever(sampler: Any, collector: GpuCollector, interval_s: float, stop: Any) -> None:
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
    closer = threading.Thread(target=close, name="gpuwatch-export-close", daemon=True)
    closer.start()
    closer.join(timeout_s)


def run_export(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from gpuwatch.export_server import MetricsServer, tls_context
    from gpuwatch.nvml import NvmlUnavailable, Sampler, open_backend

    if args.demo_gpus is not None and not args.demo:
        raise CliError("--demo-gpus goes with --demo")
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
    sampler = Sampler(backend, interval_s=args.interval)
    stale_s = _stale_after_s(args.interval)
    collector = GpuCollector(
        socket.gethostname(),
        processes=not args.no_processes,
        users=args.process_users,
        stale_after_s=stale_s,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server = MetricsServer(
            args.address, args.port, registry, tls=tls, deadline_s=args.client_timeout
        )
    except OSError as exc:
        _close_within(sampler.close, 1.0)
        raise CliError(
            f"cannot serve on {args.address}:{args.port}: {exc.strerror or exc}"
        ) from None
    server.start()
    threading.Thread(
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
