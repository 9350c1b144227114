"""A misbehaving driver, through the stub NVML, at start-up and mid-run: the monitor says what is
wrong, keeps the rest going, and always quits when asked."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pynvml
import pytest

from gpuwatch.cli import main as cli
from gpuwatch.monitor.nvml import NvmlUnavailable, Sampler
from gpuwatch.monitor.nvml._real import RealBackend, send_signal_checked
from gpuwatch.ui.top.app import TopApp
from gpuwatch.ui.widgets import GpuCard, ProcessTable
from tests.conftest import wait_until
from tests.stub_nvml import StubNvml, default_device, proc


def two_gpus() -> StubNvml:
    devices = [default_device(0), default_device(1)]
    devices[0]["compute"] = [proc(1, 1024)]  # pid 1: always there, never ours to signal
    return StubNvml(devices)


@pytest.mark.parametrize("when", ["start", "mid-run"])
@pytest.mark.parametrize("error", [pynvml.NVMLError_Timeout, pynvml.NVMLError_NoData])
def test_timeout_and_no_data_miss_one_tick_only(clock, when, error):
    nvml = two_gpus()
    backend = RealBackend(nvml=nvml, clock=clock)
    if when == "mid-run":
        assert backend.sample(0).gpu_util_pct == 42
    nvml.devices[0]["util"] = error
    g = backend.sample(0)
    assert g.gpu_util_pct is None and g.temperature_c == 55 and not g.lost  # the rest is read
    nvml.devices[0]["util"] = default_device(0)["util"]
    assert backend.sample(0).gpu_util_pct == 42  # asked again, not remembered as unsupported


@pytest.mark.parametrize("when", ["start", "mid-run"])
def test_no_permission_to_list_processes_is_said_not_silent(clock, when):
    nvml = two_gpus()
    backend = RealBackend(nvml=nvml, clock=clock)
    if when == "mid-run":
        assert [p.pid for p in backend.sample(0).processes] == [1]
    nvml.devices[0]["compute"] = pynvml.NVMLError_NoPermission
    g = backend.sample(0)
    assert g.processes == ()
    assert g.problem == "no permission to list this GPU's processes (NVML NoPermission)"
    assert backend.sample(1).problem is None  # the other GPU is fine


def test_driver_upgraded_under_us_says_reboot_at_start_and_mid_run(clock):
    with pytest.raises(NvmlUnavailable, match="reboot, or reload the driver"):
        RealBackend(nvml=StubNvml(init_error=pynvml.NVMLError_LibRmVersionMismatch), clock=clock)
    nvml = two_gpus()
    sampler = Sampler(RealBackend(nvml=nvml, clock=clock), background_pcie=False)
    assert sampler.snapshot().problem is None
    nvml.devices[0]["temp"] = pynvml.NVMLError_LibRmVersionMismatch
    snap = sampler.snapshot()
    assert snap.problem is not None and "reboot" in snap.problem
    assert snap.gpus[0].temperature_c is None and snap.gpus[1].temperature_c == 55
    assert snap.to_dict()["problem"] == snap.problem


def test_failing_device_count_is_one_line_and_exit_1(monkeypatch, capsys):
    class NoCount(StubNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise pynvml.NVMLError_Unknown(0)

    from gpuwatch.monitor.nvml import _real

    monkeypatch.setattr(_real, "_import_pynvml", NoCount)
    assert cli.main(["top", "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch: error: NVML could not count the GPUs") and err.count("\n") == 1


def test_a_gpu_without_a_handle_is_shown_and_asked_again(clock):
    class NoHandle(StubNvml):
        refuse = True

        def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
            if i == 1 and self.refuse:
                raise pynvml.NVMLError_InsufficientPower(0)
            return i

    nvml = NoHandle([default_device(0), default_device(1)])
    backend = RealBackend(nvml=nvml, clock=clock)
    assert backend.sample(0).gpu_util_pct == 42
    g = backend.sample(1)
    assert (
        not g.lost and g.problem is not None and g.problem.startswith("NVML cannot open this GPU")
    )
    assert backend.pcie_throughput(1) == (None, None)
    nvml.refuse = False
    assert backend.sample(1).gpu_util_pct == 42 and backend.sample(1).problem is None


def test_gpu_lost_on_the_pcie_thread_marks_it_and_the_thread_goes_on(clock):
    nvml = two_gpus()
    nvml.devices[0]["pcie_kb"] = pynvml.NVMLError_GpuIsLost
    sampler = Sampler(RealBackend(nvml=nvml, clock=clock), interval_s=0.05)
    try:
        deadline = time.monotonic() + 5
        while sampler.snapshot().gpus[1].pcie_rx_bytes_per_s is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        snap = sampler.snapshot()
        assert snap.gpus[0].lost and snap.gpus[1].pcie_rx_bytes_per_s == 2000 * 1024
        assert sampler._thread is not None and sampler._thread.is_alive()
    finally:
        sampler.close()


class HangingNvml(StubNvml):
    """Every utilisation read after the first hangs until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__([default_device(0)])
        self.release = threading.Event()
        self.hanging = threading.Event()
        self.reads = 0

    def nvmlDeviceGetUtilizationRates(self, h: int):  # type: ignore[no-untyped-def]
        self.reads += 1
        if self.reads > 1:
            self.hanging.set()
            self.release.wait()
        return super().nvmlDeviceGetUtilizationRates(h)


async def test_q_quits_within_a_second_while_an_nvml_call_hangs(clock):
    nvml = HangingNvml()
    app = TopApp(RealBackend(nvml=nvml, clock=clock), interval_s=0.1)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(lambda: nvml.hanging.is_set(), 10)
            began = time.monotonic()
            await pilot.press("q")
        assert time.monotonic() - began < 1.0
        assert nvml.shutdowns == 0  # nvmlShutdown would wait on the hung call
    finally:
        nvml.release.set()


@pytest.mark.slow
def test_the_top_command_quits_while_nvml_hangs():
    # The whole process, as a user runs it: q must end it though a sampling thread is stuck.
    code = (
        "import threading, time\n"
        "from tests.test_nvml_faults import HangingNvml\n"
        "from gpuwatch.ui.top.app import TopApp\n"
        "from gpuwatch.monitor.nvml._real import RealBackend\n"
        "nvml = HangingNvml()\n"
        "app = TopApp(RealBackend(nvml=nvml), interval_s=0.1)\n"
        "def quit_when_hung():\n"
        "    nvml.hanging.wait()\n"
        "    app.call_from_thread(app.exit)\n"
        "threading.Thread(target=quit_when_hung, daemon=True).start()\n"
        "t = time.monotonic()\n"
        "app.run(headless=True)\n"
        "print(f'{time.monotonic() - t:.1f}')\n"
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 20  # the interpreter did not wait on the hung thread


@pytest.mark.slow
async def test_kill_rechecks_the_process_before_signalling(clock):
    from gpuwatch.monitor.nvml import FakeBackend
    from gpuwatch.ui.screens import KillScreen

    backend = FakeBackend(gpu_count=1, clock=clock)
    app = TopApp(backend, interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(lambda: app.query_one(ProcessTable).selected is not None)
        target = app.query_one(ProcessTable).selected
        assert target is not None
        await pilot.press("k")
        assert isinstance(app.screen, KillScreen)
        backend.start_times[target.pid] = 1.0  # it ended, and its pid went to a new process
        await pilot.press("t")
        await pilot.pause()
        assert backend.signals == []  # the stranger was not signalled
        assert any("already exited" in str(n.message) for n in app._notifications)
        assert app.query_one("#gpu-0", GpuCard).sample is not None


@pytest.mark.slow
def test_signal_reaches_only_the_process_that_started_then():
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(child.pid).create_time()
        with pytest.raises(ProcessLookupError):
            send_signal_checked(child.pid, 15, started - 5.0)  # another process's start
        assert child.poll() is None
        send_signal_checked(child.pid, 15, started)
        assert child.wait(timeout=10) == -15
    finally:
        child.kill()
