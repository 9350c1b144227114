"""GPM (SM activity and the rest), energy, low SM activity and held-idle GPUs: the real backend
against the stub NVML, and the Sampler's figures over time with a fixed clock."""

from __future__ import annotations

import datetime as _dt
import logging

import pynvml
import pytest

from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.monitor.nvml._real import RealBackend
from gpuwatch.monitor.nvml.activity import IdlePolicy
from tests.stub_nvml import StubNvml, default_device, gpm_device

MIB = 1024 * 1024
T0 = _dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=_dt.UTC)


class Now:
    """The Sampler's wall clock, moved by hand."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> _dt.datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += _dt.timedelta(seconds=seconds)


def test_gpm_metrics_come_from_two_samples_in_order(clock):
    nvml = StubNvml([gpm_device(0)])
    backend = RealBackend(nvml=nvml, clock=clock)
    first = backend.sample(0)
    # one GPM sample is no measurement: nothing yet, and nothing made up
    assert first.gpm is True and first.sm_active_pct is None
    g = backend.sample(0)
    assert (g.sm_active_pct, g.sm_occupancy_pct, g.tensor_active_pct, g.dram_active_pct) == (
        37.5,
        12.2,
        20.0,
        55.0,
    )
    assert g.nvlink_tx_bytes_per_s is None  # the stub card has no NVLink metrics
    # the stub refuses a request whose samples are out of order: buffers alternate correctly
    for _ in range(3):
        assert backend.sample(0).sm_active_pct == 37.5
    assert nvml.calls["gpm_alloc"] == 2 and nvml.calls["gpm_metrics"] == 4
    backend.close()
    assert nvml.gpm_freed == 2


def test_pcie_rates_come_from_gpm_without_the_slow_call(clock):
    nvml = StubNvml([gpm_device(0)])
    backend = RealBackend(nvml=nvml, clock=clock)
    assert backend.pcie_throughput(0) == (102_400, 2_048_000)  # no GPM reading yet: NVML's
    backend.sample(0), backend.sample(0)
    slow_calls = nvml.calls["pcie"]
    assert backend.pcie_throughput(0) == (100 * MIB, 250 * MIB)  # GPM's MiB/s
    assert nvml.calls["pcie"] == slow_calls


def test_no_gpm_is_said_once_and_utilisation_stays(clock, caplog):
    nvml = StubNvml([default_device(0)])
    backend = RealBackend(nvml=nvml, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwatch.monitor.nvml"):
        samples = [backend.sample(0) for _ in range(3)]
    assert all(g.gpm is False and g.sm_active_pct is None for g in samples)
    assert samples[-1].gpu_util_pct == 42
    said = [r.getMessage() for r in caplog.records if "no GPM" in r.getMessage()]
    assert said == [
        "GPU 0 has no GPM (NVML's GPU performance metrics, Hopper and later): SM activity, "
        "occupancy and tensor activity are not known there; utilisation is shown instead"
    ]
    assert nvml.calls["gpm_support"] == 1 and nvml.calls["gpm_alloc"] == 0


@pytest.mark.parametrize(
    "error", [pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported]
)
def test_a_driver_without_gpm_calls_falls_back(clock, error):
    dev = gpm_device(0)
    dev["gpm_supported"] = error
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    g = [backend.sample(0) for _ in range(2)][-1]
    assert g.gpm is False and g.sm_active_pct is None and g.gpu_util_pct == 42
    assert nvml.calls["gpm_support"] == 1


def test_a_gpu_whose_gpm_samples_are_refused_says_no_gpm(clock, caplog):
    dev = gpm_device(0)
    dev["gpm"] = pynvml.NVMLError_NotSupported  # a MIG-split GPU: GPM per instance only
    nvml = StubNvml([dev])
    backend = RealBackend(nvml=nvml, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwatch.monitor.nvml"):
        samples = [backend.sample(0) for _ in range(3)]
    assert [g.gpm for g in samples] == [False, False, False]
    assert sum("has no GPM" in r.getMessage() for r in caplog.records) == 1
    assert nvml.calls["gpm_sample"] == 1  # not asked again


def test_energy_since_start_and_mean_power_from_the_counter(clock):
    nvml = StubNvml([default_device(0)])
    now = Now()
    sampler = Sampler(RealBackend(nvml=nvml, clock=clock), background_pcie=False, now=now)
    g = sampler.snapshot().gpus[0]
    assert (g.energy_total_mj, g.energy_since_start_j, g.power_avg_w) == (5_000_000, 0.0, None)
    nvml.devices[0]["energy_mj"] = 5_000_000 + 700_500  # 700.5 J in 2 s
    now.advance(2.0)
    g = sampler.snapshot().gpus[0]
    assert (g.energy_since_start_j, g.power_avg_w) == (700.5, 350.2)
    nvml.devices[0]["energy_mj"] = 1_000  # the driver was reloaded: the counter restarts
    now.advance(1.0)
    g = sampler.snapshot().gpus[0]
    assert (g.energy_since_start_j, g.power_avg_w) == (0.0, None)
    sampler.close()


def test_energy_not_supported_is_none(clock):
    dev = default_device(0)
    dev["energy_mj"] = pynvml.NVMLError_NotSupported
    sampler = Sampler(RealBackend(nvml=StubNvml([dev]), clock=clock), background_pcie=False)
    g = sampler.snapshot().gpus[0]
    assert (g.energy_total_mj, g.energy_since_start_j, g.power_avg_w) == (None, None, None)
    sampler.close()


def test_held_idle_after_the_set_time_and_cleared_by_work(clock):
    fake = FakeBackend(gpu_count=2, clock=clock, idle_gpus={1})
    now = Now()
    sampler = Sampler(
        fake, background_pcie=False, now=now, idle=IdlePolicy(below_pct=5, after_s=60)
    )
    g0, g1 = sampler.snapshot().gpus
    assert g1.held_idle_s == 0.0 and not g1.held_idle
    assert g0.held_idle_s is None and not g0.held_idle
    now.advance(59.5)
    assert sampler.snapshot().gpus[1].held_idle is False
    now.advance(0.5)
    g1 = sampler.snapshot().gpus[1]
    assert (g1.held_idle_s, g1.held_idle) == (60.0, True)
    fake.idle_gpus.clear()  # work starts again
    now.advance(1)
    g1 = sampler.snapshot().gpus[1]
    assert (g1.held_idle_s, g1.held_idle) == (None, False)
    now.advance(1)
    fake.idle_gpus.add(1)
    assert sampler.snapshot().gpus[1].held_idle_s == 0.0  # the clock starts again


def test_an_idle_gpu_nobody_holds_is_not_held_idle(clock):
    fake = FakeBackend(gpu_count=1, clock=clock, idle_gpus={0}, processes_per_gpu=0)
    now = Now()
    sampler = Sampler(fake, background_pcie=False, now=now, idle=IdlePolicy(after_s=0))
    g = sampler.snapshot().gpus[0]
    assert g.gpu_util_pct == 0 and g.held_idle_s is None and not g.held_idle


def test_idle_is_judged_by_utilisation_where_there_is_no_gpm(clock):
    fake = FakeBackend(gpu_count=1, clock=clock, idle_gpus={0}, gpm=False)
    sampler = Sampler(fake, background_pcie=False, idle=IdlePolicy(after_s=0))
    g = sampler.snapshot().gpus[0]
    assert g.sm_active_pct is None and g.gpu_util_pct == 0 and g.held_idle


def test_high_utilisation_with_low_sm_activity_is_flagged(clock):
    fake = FakeBackend(gpu_count=2, clock=clock, stuck_gpus={1})
    sampler = Sampler(fake, background_pcie=False)
    g0, g1 = sampler.snapshot().gpus
    assert (g1.gpu_util_pct, g1.sm_active_pct, g1.low_sm_activity) == (100, 12.0, True)
    assert not g0.low_sm_activity and g0.sm_active_pct == round(0.8 * g0.gpu_util_pct, 1)
    # without GPM nothing can be said: never flagged
    plain = Sampler(FakeBackend(gpu_count=2, clock=clock, stuck_gpus={1}, gpm=False))
    assert not plain.snapshot().gpus[1].low_sm_activity
    plain.close()


def test_the_profile_timeline_and_html_carry_sm_activity(clock):
    from gpuwatch.monitor.gpu_timeline import sample_row
    from gpuwatch.output.html_charts import _timeline
    from gpuwatch.output.trace import trace_events
    from profilers import Report

    sampler = Sampler(FakeBackend(gpu_count=1, clock=clock, stuck_gpus={0}), background_pcie=False)
    g = sampler.snapshot().gpus[0]
    row = sample_row(0.5, g)
    assert (row["gpu_util_pct"], row["sm_active_pct"], row["tensor_active_pct"]) == (100, 12.0, 7.2)
    r = Report(command=["train.py"], duration_s=1.0)
    r = r.replace(gpu_samples=[row, {**row, "t": 1.0}])
    names = [trace.name for trace in _timeline(r).data]
    assert "GPU 0 util %" in names and "GPU 0 SM active %" in names
    counters = [e for e in trace_events(r) if e.get("ph") == "C"]
    assert counters[0]["args"]["sm_active_pct"] == 12.0
    r = r.replace(gpu_samples=[{**row, "sm_active_pct": None}])  # no GPM: no empty SM line
    assert "GPU 0 SM active %" not in [trace.name for trace in _timeline(r).data]
