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

from gpuwatch.monitor.export import GpuCollector
from gpuwatch.monitor.nvml import Sampler
from gpuwatch.monitor.nvml.fake import FakeBackend
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


def test_gpm_energy_and_held_idle_under_dcgm_names_and_units(clock):
    from gpuwatch.monitor.nvml.activity import IdlePolicy

    fake = FakeBackend(gpu_count=3, clock=clock, idle_gpus={1}, stuck_gpus={2})
    sampler = Sampler(fake, background_pcie=False, idle=IdlePolicy(after_s=0))
    c = GpuCollector("node-a")
    c.snapshot = snap = sampler.snapshot()
    got = scrape(c)

    def by_gpu(name: str) -> dict[str, float]:
        return {s.labels["gpu"]: s.value for s in got[name]}

    g0 = snap.gpus[0]
    # DCGM's profiling fields are ratios 0-1
    assert by_gpu("DCGM_FI_PROF_SM_ACTIVE")["0"] == pytest.approx(g0.sm_active_pct / 100)
    assert by_gpu("DCGM_FI_PROF_SM_ACTIVE")["2"] == pytest.approx(0.12)
    assert by_gpu("DCGM_FI_PROF_SM_OCCUPANCY")["2"] == pytest.approx(0.054)
    assert by_gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")["2"] == pytest.approx(0.072)
    assert by_gpu("DCGM_FI_PROF_DRAM_ACTIVE")["0"] == pytest.approx(g0.dram_active_pct / 100)
    assert by_gpu("DCGM_FI_PROF_PCIE_TX_BYTES")["0"] == g0.pcie_tx_bytes_per_s  # bytes/s
    assert by_gpu("DCGM_FI_PROF_NVLINK_RX_BYTES")["0"] == g0.nvlink_rx_bytes_per_s
    # energy in mJ since the driver loaded, as DCGM
    assert by_gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")["0"] == g0.energy_total_mj
    assert by_gpu("gpuwatch_gpu_held_idle") == {"0": 0.0, "1": 1.0, "2": 0.0}
    assert by_gpu("gpuwatch_gpu_held_idle_seconds") == {"1": 0.0}  # only the GPU held idle
    assert by_gpu("gpuwatch_gpu_low_sm_activity") == {"0": 0.0, "1": 0.0, "2": 1.0}
    assert got["DCGM_FI_PROF_SM_ACTIVE"][0].labels.keys() == {
        "gpu", "UUID", "device", "modelName", "pci_bus_id", "Hostname"
    }  # fmt: skip


def test_without_gpm_the_profiling_series_are_absent(clock):
    sampler = Sampler(FakeBackend(gpu_count=1, clock=clock, gpm=False), background_pcie=False)
    c = GpuCollector("node-a")
    c.snapshot = sampler.snapshot()
    got = scrape(c)
    for name in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
                 "gpuwatch_gpu_low_sm_activity"):  # fmt: skip
        assert got.get(name, []) == [], name
    assert len(got["DCGM_FI_DEV_GPU_UTIL"]) == 1  # utilisation stays


def test_job_labels_are_opt_in_with_dcgm_names(clock):
    snap = Sampler(FakeBackend(gpu_count=2, clock=clock), background_pcie=False).snapshot()
    plain = GpuCollector("node-a")
    plain.snapshot = snap
    assert all(
        "hpc_job" not in s.labels for s in scrape(plain)["gpuwatch_process_gpu_memory_bytes"]
    )
    jobs = GpuCollector("node-a", jobs=True)
    jobs.snapshot = snap
    labels = {
        s.labels["pid"]: {k: s.labels[k] for k in ("pod", "namespace", "container", "hpc_job")}
        for s in scrape(jobs)["gpuwatch_process_gpu_memory_bytes"]
    }
    assert labels["4100"] == {"pod": "", "namespace": "", "container": "", "hpc_job": "4242"}
    assert labels["4111"] == {
        "pod": "carol-notebook-0", "namespace": "research", "container": "3f2a9c1d0b7e",
        "hpc_job": "",
    }  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.fake_cuda
@pytest.mark.slow
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


@pytest.mark.slow
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
    # the new series, by their dcgm-exporter names, with the job labels --process-jobs adds
    sm = query_prometheus(prom.port, "DCGM_FI_PROF_SM_ACTIVE")
    assert sorted(s["metric"]["gpu"] for s in sm) == ["0", "1"]
    assert all(0 <= float(s["value"][1]) <= 1 for s in sm)  # a ratio, as DCGM's
    energy = query_prometheus(prom.port, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert len(energy) == 2 and all(float(s["value"][1]) >= 3.5e11 for s in energy)  # mJ
    assert len(query_prometheus(prom.port, "gpuwatch_gpu_held_idle == 0")) == 2
    carol = query_prometheus(prom.port, 'gpuwatch_process_gpu_memory_bytes{pod!=""}')
    assert [(s["metric"]["namespace"], s["metric"]["pod"]) for s in carol] == [
        ("research", "carol-notebook-0")
    ]
    slurm = query_prometheus(prom.port, 'gpuwatch_process_gpu_memory_bytes{hpc_job="4242"}')
    assert [s["metric"]["gpu"] for s in slurm] == ["0"]
    assert prom.exporter.poll() is None  # still serving


def query_prometheus(port: int, query: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as answer:
        return list(json.load(answer)["data"]["result"])
