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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuwatch.cli_errors import CliError
from gpuwatch.nvml.samples import GpuSample, Snapshot

MIB = 1024 * 1024


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

    def __init__(self, hostname: str, processes: bool = True, users: bool = False) -> None:
        self.hostname = hostname
        self.processes = processes
        self.users = users
        self.snapshot: Snapshot | None = None

    def describe(self) -> list[Any]:
        return []  # families are built per scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        snap = self.snapshot
        if snap is None:
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
    """A process's short name, bounded: never its arguments."""
    return (os.path.basename(name or "") or "?")[:64]


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
    e.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from gpuwatch.nvml import NvmlUnavailable, Sampler, open_backend

    if args.demo_gpus is not None and not args.demo:
        raise CliError("--demo-gpus goes with --demo")
    if bool(args.certfile) != bool(args.keyfile):
        raise CliError("--certfile and --keyfile go together")
    try:
        backend = open_backend(demo=args.demo, demo_gpus=args.demo_gpus or 2)
    except NvmlUnavailable as exc:
        raise CliError(f"{exc} (--demo serves simulated GPUs)", code=1) from None
    sampler = Sampler(backend, interval_s=args.interval)
    collector = GpuCollector(
        socket.gethostname(), processes=not args.no_processes, users=args.process_users
    )
    collector.snapshot = sampler.snapshot()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _ = start_http_server(
            args.port, addr=args.address, registry=registry,
            certfile=args.certfile, keyfile=args.keyfile,
        )  # fmt: skip
    except OSError as exc:
        sampler.close()
        raise CliError(
            f"cannot serve on {args.address}:{args.port}: {exc.strerror or exc}"
        ) from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, lambda *_: stop.set())
    scheme = "https" if args.certfile else "http"
    print(
        f"gpuwatch export: {sampler.gpu_count} GPU(s) ({sampler.source}) at "
        f"{scheme}://{args.address}:{args.port}/metrics, every {args.interval:g} s",
        flush=True,
    )
    try:
        while not stop.wait(args.interval):
            try:
                collector.snapshot = sampler.snapshot()
            except Exception as exc:  # a failed sample keeps the last one served
                print(f"gpuwatch export: sampling failed: {exc}", flush=True)
    finally:
        server.shutdown()
        sampler.close()
    return 0
