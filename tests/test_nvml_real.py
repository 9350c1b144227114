"""The real NVML backend against a stubbed pynvml: every error path a driver can take."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pynvml
import pytest

from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler
from gpuwatch.monitor.nvml._real import RealBackend
from tests.stub_nvml import StubNvml, default_device, proc

GIB = 1024**3


def test_reads_every_field_with_units(clock):
    nvml = StubNvml()
    g = RealBackend(nvml=nvml, clock=clock).sample(0)
    assert (g.name, g.uuid, g.pci_bus_id) == ("Stub GPU 0", "GPU-stub-0", "00000000:01:00.0")
    assert (g.gpu_util_pct, g.mem_util_pct) == (42, 17)
    assert (g.memory_used_bytes, g.memory_total_bytes) == (3 * GIB, 16 * GIB)
    assert g.temperature_c == 55
    assert g.power_w == pytest.approx(123.456)  # NVML reports milliwatts
    assert g.power_limit_w == pytest.approx(300.0)
    assert (g.fan_pct, g.sm_clock_mhz, g.mem_clock_mhz, g.pstate) == (30, 1410, 1215, 2)
    assert (g.encoder_util_pct, g.decoder_util_pct) == (5, 0)
    assert not g.lost


def test_pcie_is_converted_from_kb_per_s(clock):
    backend = RealBackend(nvml=StubNvml(), clock=clock)
    # NVML gives KB/s: 100 KB/s TX = 102400 B/s, 2000 KB/s RX = 2048000 B/s
    assert backend.pcie_throughput(0) == (102_400, 2_048_000)


def test_not_supported_becomes_none_and_is_not_retried(clock):
    dev = default_device()
    dev["fan"] = pynvml.NVMLError_NotSupported
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    first, second = backend.sample(0), backend.sample(0)
    assert first.fan_pct is None and second.fan_pct is None
    assert first.temperature_c == 55  # the other fields are unaffected
    assert nvml.calls["fan"] == 1  # remembered: asked once, not every tick
    assert nvml.calls["temp"] == 2


def test_function_not_found_is_logged_once(clock, caplog):
    dev = default_device()
    dev["enc"] = pynvml.NVMLError_FunctionNotFound
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwatch.monitor.nvml"):
        for _ in range(3):
            assert backend.sample(0).encoder_util_pct is None
    messages = [
        r.getMessage()
        for r in caplog.records
        if "nvmlDeviceGetEncoderUtilization" in r.getMessage()
    ]
    assert len(messages) == 1 and "driver older" in messages[0]
    assert nvml.calls["enc"] == 1


def test_gpu_lost_mid_run_marks_that_gpu_and_keeps_the_others(clock):
    nvml = StubNvml([default_device(0), default_device(1)])
    sampler = Sampler(RealBackend(nvml=nvml, clock=clock), background_pcie=False)
    assert not any(g.lost for g in sampler.snapshot().gpus)
    nvml.devices[1]["util"] = pynvml.NVMLError_GpuIsLost
    snap = sampler.snapshot()
    assert [g.lost for g in snap.gpus] == [False, True]
    lost = snap.gpus[1]
    assert lost.name == "Stub GPU 1" and lost.gpu_util_pct is None  # identity kept, values gone
    calls = nvml.calls["temp"]
    sampler.snapshot()
    assert nvml.calls["temp"] == calls + 1  # only GPU 0 is still asked
    assert snap.gpus[0].gpu_util_pct == 42


def test_unknown_error_also_marks_gpu_lost(clock):
    dev = default_device()
    dev["mem"] = pynvml.NVMLError_Unknown
    assert RealBackend(nvml=StubNvml([dev]), clock=clock).sample(0).lost


def test_nvml_missing_gives_one_line_with_no_cli_advice():
    with pytest.raises(NvmlUnavailable) as exc:
        RealBackend(nvml=StubNvml(init_error=pynvml.NVMLError_LibraryNotFound))
    assert str(exc.value) == (
        "NVML library (libnvidia-ml.so) not found: is the NVIDIA driver installed?"
    )  # advice on flags (--demo) is the CLI's to give


def test_driver_not_loaded():
    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        RealBackend(nvml=StubNvml(init_error=pynvml.NVMLError_DriverNotLoaded))


def test_zero_gpus_is_an_error_and_shuts_nvml_down():
    nvml = StubNvml(devices=[])
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPUs"):
        RealBackend(nvml=nvml)
    assert nvml.shutdowns == 1


def test_close_shuts_down_once(clock):
    nvml = StubNvml()
    backend = RealBackend(nvml=nvml, clock=clock)
    backend.close()
    backend.close()
    assert nvml.shutdowns == 1


def test_processes_merge_compute_and_graphics_with_host_info(clock):
    me = os.getpid()
    dev = default_device()
    dev["compute"] = [proc(me, 512 * 1024**2)]
    dev["graphics"] = [proc(me, None)]
    dev["proc_util"] = [SimpleNamespace(pid=me, timeStamp=10, smUtil=33)]
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    (p,) = backend.sample(0).processes
    assert p.pid == me and p.type == "compute+graphics"
    assert p.gpu_memory_bytes == 512 * 1024**2
    assert p.sm_util_pct == 33
    assert p.name and "python" in p.name.lower()
    assert p.host_memory_bytes and p.host_memory_bytes > 0
    assert p.cpu_pct is None  # the first sighting only primes psutil's counter
    (p2,) = backend.sample(0).processes
    assert p2.cpu_pct is not None
    # the second utilisation query asks only for samples newer than the last one seen
    assert nvml.proc_util_since == [0, 10]


@pytest.mark.slow
def test_process_that_exits_between_listing_and_lookup_is_dropped(clock):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dev = default_device()
    dev["compute"] = [proc(os.getpid(), GIB), proc(gone.pid, GIB)]
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    assert [p.pid for p in backend.sample(0).processes] == [os.getpid()]
    dev["compute"] = [proc(os.getpid(), GIB)]  # NVML no longer lists it either
    assert [p.pid for p in backend.sample(0).processes] == [os.getpid()]


def test_process_psutil_never_sees_is_shown_once_nvml_keeps_listing_it(clock):
    # A process in another PID namespace (a container): NVML lists it tick after tick.
    ghost = 2**22 + 12345  # above any pid_max psutil can see
    dev = default_device()
    dev["compute"] = [proc(ghost, 2 * GIB)]
    backend = RealBackend(nvml=StubNvml([dev]), clock=clock)
    assert backend.sample(0).processes == ()
    (p,) = backend.sample(0).processes
    assert (p.pid, p.gpu_memory_bytes, p.user, p.command) == (ghost, 2 * GIB, None, None)


def test_nvlink_rate_from_counter_differences(clock):
    dev = default_device()
    dev["nvlink_links"] = 2
    dev["nvlink_kib"] = (1000, 4000)
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    first = backend.sample(0)
    assert (first.nvlink_tx_bytes_per_s, first.nvlink_rx_bytes_per_s) == (None, None)
    dev["nvlink_kib"] = (3000, 8000)
    clock.advance(2.0)
    g = backend.sample(0)
    # (3000 - 1000) KiB over 2 s = 1000 KiB/s = 1_024_000 B/s; (8000 - 4000) / 2 = 2000 KiB/s
    assert (g.nvlink_tx_bytes_per_s, g.nvlink_rx_bytes_per_s) == (1_024_000, 2_048_000)


def test_no_nvlink_probes_once(clock):
    nvml = StubNvml()
    backend = RealBackend(nvml=nvml, clock=clock)
    for _ in range(3):
        assert backend.sample(0).nvlink_tx_bytes_per_s is None
    assert nvml.calls["nvlink_state"] == 1
    assert nvml.calls["fields"] == 0


@pytest.mark.slow
def test_send_signal_reaches_a_real_process(clock):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        RealBackend(nvml=StubNvml(), clock=clock).send_signal(child.pid, signal.SIGTERM)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()
