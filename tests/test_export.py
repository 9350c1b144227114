"""``gpuwatch export``: dcgm-exporter's names, labels and units, values NVML lacks left out, what
a process may say about itself, and a real Prometheus server scraping it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.export import GpuCollector
from gpuwatch.nvml import Sampler
from gpuwatch.nvml.fake import FakeBackend
from tests import conftest


def scrape(collector: GpuCollector) -> dict[str, list]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def demo_snapshot(gpus: int = 2):
    sampler = Sampler(FakeBackend(gpu_count=gpus), background_pcie=False)
    try:
        return sampler.snapshot()
    finally:
        sampler.close()


def test_dcgm_names_labels_and_units():
    snap = demo_snapshot()
    c = GpuCollector("node-a")
    c.snapshot = snap
    got = scrape(c)
    g0 = snap.gpus[0]
    used = {s.labels["gpu"]: s for s in got["DCGM_FI_DEV_FB_USED"]}
    assert used["0"].labels == {
        "gpu": "0",
        "UUID": g0.uuid,
        "device": "nvidia0",
        "modelName": g0.name,
        "pci_bus_id": g0.pci_bus_id,
        "Hostname": "node-a",
    }
    assert used["0"].value == g0.memory_used_bytes / 2**20  # MiB, as DCGM
    free = {s.labels["gpu"]: s.value for s in got["DCGM_FI_DEV_FB_FREE"]}
    assert free["0"] == (g0.memory_total_bytes - g0.memory_used_bytes) / 2**20
    assert {s.labels["gpu"] for s in got["DCGM_FI_DEV_GPU_UTIL"]} == {"0", "1"}
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):  # fmt: skip
        assert len(got[name]) == 2, name
    # processes: a short name, never the arguments; no user label unless asked
    procs = got["gpuwatch_process_gpu_memory_bytes"]
    assert procs and all("user" not in s.labels for s in procs)
    assert all(" " not in s.labels["command"] and "/" not in s.labels["command"] for s in procs)


def test_what_nvml_does_not_say_is_absent_not_zero_and_processes_are_opt_out():
    snap = demo_snapshot()
    g1 = dataclasses.replace(snap.gpus[1], power_w=None, pcie_tx_bytes_per_s=None)
    c = GpuCollector("node-a", processes=False)
    c.snapshot = dataclasses.replace(snap, gpus=(snap.gpus[0], g1))
    got = scrape(c)
    assert [s.labels["gpu"] for s in got["DCGM_FI_DEV_POWER_USAGE"]] == ["0"]
    assert "1" not in {s.labels["gpu"] for s in got["DCGM_FI_DEV_PCIE_TX_THROUGHPUT"]}
    assert not any(name.startswith("gpuwatch_process") for name in got)
    users = GpuCollector("node-a", users=True)
    users.snapshot = snap
    assert all("user" in s.labels for s in scrape(users)["gpuwatch_process_sm_util_percent"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gpuwatch", "export", "--demo", "--address", "127.0.0.1",
             "--port", str(port)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"gpuwatch: error: cannot serve on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus")
def test_a_real_prometheus_scrapes_both_demo_gpus():
    # NB: the exporter and the Prometheus server were started when the session began
    # (tests/conftest.py): Prometheus takes about 5 s to hand a new target to its scrapers,
    # which then overlap the other tests.
    prom = conftest.PROMETHEUS
    assert prom is not None, "the session did not start Prometheus"
    query = urllib.parse.urlencode({"query": "DCGM_FI_DEV_GPU_UTIL"})
    url = f"http://127.0.0.1:{prom.port}/api/v1/query?{query}"
    series: list = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(series) < 2:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                series = json.load(answer)["data"]["result"]
        except (OSError, ValueError, KeyError):
            pass
        if len(series) < 2:
            time.sleep(0.2)
    assert len(series) == 2, f"Prometheus never scraped both GPUs: {series}"
    labels = sorted((s["metric"]["gpu"], s["metric"]["device"]) for s in series)
    assert labels == [("0", "nvidia0"), ("1", "nvidia1")]
    assert all(s["metric"]["job"] == "gpuwatch" and s["metric"]["Hostname"] for s in series)
    assert all(0 <= float(s["value"][1]) <= 100 for s in series)
    assert prom.exporter.poll() is None  # still serving
