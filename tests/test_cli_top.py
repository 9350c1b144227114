"""``gpuwatch top --once/--json`` and the command line, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuwatch import __version__
from gpuwatch.cli import main as cli
from gpuwatch.monitor.nvml import FakeBackend, NvmlUnavailable, Sampler
from gpuwatch.output.snapshot import snapshot_text
from tests import helpers

GPU_KEYS = {
    "index",
    "name",
    "uuid",
    "gpu_util_pct",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "fan_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "processes",
}
PROC_KEYS = {"pid", "name", "user", "gpu_memory_bytes", "sm_util_pct"}

ENTRY_POINTS = [["gpuwatch"], [sys.executable, "-m", "gpuwatch"]]


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return helpers.run(args, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["script", "module"])
def test_json_snapshot_has_the_contract_fields(entry):
    done = run([*entry, "top", "--demo", "--demo-gpus", "3", "--json"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "gpuwatch.snapshot/1"
    assert doc["driver_version"] == "560.35.03 (demo)"
    assert len(doc["gpus"]) == 3
    for gpu in doc["gpus"]:
        assert GPU_KEYS <= gpu.keys()
        assert gpu["fan_pct"] is None  # not reported: null, never a string
        assert gpu["pcie_rx_bytes_per_s"] > 0  # measured inline for a one-shot snapshot
        for p in gpu["processes"]:
            assert PROC_KEYS <= p.keys()


@pytest.mark.slow
def test_once_prints_gpus_and_processes():
    import os

    # into a pipe with no COLUMNS: 200 columns, as for a file
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        ["gpuwatch", "top", "--demo", "--once"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b[" not in out  # plain text when piped
    assert "H100 80GB" in out and "/ 80.0 GiB" in out and "/ 700W" in out
    assert "python train.py --config resnet50.yaml" in out
    assert max(len(line) for line in out.splitlines()) < 200


def test_once_fits_the_terminal_and_demo_gpus_needs_demo(capsys, monkeypatch):
    from gpuwatch.cli.main import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["top", "--demo", "--once"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "H100" in out
    assert main(["top", "--demo-gpus", "3", "--once"]) == 2
    assert "--fake-gpus goes with --demo" in capsys.readouterr().err


def test_once_text_lists_a_lost_gpu_and_no_processes():
    snap = Sampler(FakeBackend(gpu_count=1, processes_per_gpu=0), background_pcie=False).snapshot()
    text = snapshot_text(snap)
    assert "no processes are using the GPUs" in text


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["script", "module"])
def test_version_and_help(entry):
    assert run([*entry, "--version"]).stdout.strip() == f"gpuwatch {__version__}"
    top_help = run([*entry, "top", "--help"])
    assert (
        top_help.returncode == 0 and "--interval" in top_help.stdout and "--demo" in top_help.stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["top", "--interval", "0.05"], "must be between 0.1 and 3600 seconds, not 0.05"),
        (["top", "--interval", "fast"], "not a number"),
        (["top", "--once", "--json"], "not allowed with"),
        (["top", "--demo-gpus", "0"], "must be from 1 to 64, not 0"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    done = run(["gpuwatch", *args])
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_no_nvml_exits_1_with_a_hint(monkeypatch, capsys):
    def unavailable(**_kw):
        raise NvmlUnavailable(
            "NVML library (libnvidia-ml.so) not found: is the NVIDIA driver installed?"
        )

    monkeypatch.setattr("gpuwatch.monitor.nvml.open_backend", unavailable)
    assert cli.main(["top", "--once"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "gpuwatch: error: NVML library (libnvidia-ml.so) not found: is the NVIDIA driver "
        "installed? (--demo shows simulated GPUs)\n"
    )  # the advice is the CLI's: the NVML layer's message carries none


def _nvml_loadable() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.slow
@pytest.mark.skipif(_nvml_loadable(), reason="this machine has a working NVML")
def test_real_machine_without_nvml_gets_one_line_not_a_traceback():
    done = run(["gpuwatch", "top", "--json"])
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("gpuwatch: error:") and "--demo" in done.stderr
    assert done.stderr.count("\n") == 1
