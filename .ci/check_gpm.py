"""GPM figures and the energy counter of gpuwatch on a real GPU, against ``nvidia-smi``:
``python3 .ci/check_gpm.py`` (run by ``.ci/gpu_checks.sh run``).

Three phases on GPU 0, sampled by gpuwatch's Sampler every 0.5 s while ``nvidia-smi`` samples the
same seconds: idle; large matmuls (SM activity must be high, as nvidia-smi's GPM metric says);
one tiny kernel at a time (utilisation high, SM activity low: LOW SM ACTIVITY). The mean power
from the energy counter must agree with ``power.draw``. Exit code 1 when a check fails; a GPU
without GPM (before Hopper) checks the energy and says GPM was not checked.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import torch

from gpuwatch.monitor.nvml import Sampler
from gpuwatch.monitor.nvml._real import RealBackend

SECONDS = 6
failed: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failed.append(what)


def smi(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["nvidia-smi", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def dmon_rows(text: str) -> list[list[float]]:
    """The numeric rows of ``nvidia-smi dmon`` output (header lines start with #)."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or line.lstrip().startswith("#"):
            continue
        try:
            rows.append([float("nan") if p == "-" else float(p) for p in parts])
        except ValueError:
            continue
    return rows


def phase(name: str, work: Callable[[threading.Event], None] | None) -> dict[str, object]:
    stop = threading.Event()
    worker = threading.Thread(target=work, args=(stop,), daemon=True) if work else None
    if worker:
        worker.start()
        time.sleep(1.0)  # the work is under way before anything is measured
    sampler = Sampler(RealBackend(), interval_s=0.5, background_pcie=False)
    dmon_u = smi(["dmon", "-s", "u", "-i", "0", "-c", str(SECONDS)])
    dmon_gpm = smi(["dmon", "--gpm-metrics", "2", "-i", "0", "-c", str(SECONDS)])
    power = smi(["--query-gpu=power.draw", "--format=csv,noheader,nounits", "-i", "0",
                 "-lms", "500"])  # fmt: skip
    samples = []
    t_end = time.monotonic() + SECONDS
    while time.monotonic() < t_end:
        samples.append(sampler.snapshot().gpus[0])
        time.sleep(0.5)
    power.terminate()
    stop.set()
    if worker:
        worker.join(5)
    sampler.close()
    u_out, gpm_out = dmon_u.communicate(30)[0], dmon_gpm.communicate(30)[0]
    watts = [float(x) for x in power.communicate(10)[0].split() if x.replace(".", "").isdigit()]
    later = samples[2:]  # GPM and the mean power need two samples: the first ones are None
    result = {
        "util": statistics.mean(g.gpu_util_pct or 0 for g in later),
        "sm_active": [g.sm_active_pct for g in later],
        "low_sm": [g.low_sm_activity for g in later],
        "power_avg_w": [g.power_avg_w for g in later if g.power_avg_w is not None],
        "energy_j": later[-1].energy_since_start_j,
        "gpm": later[-1].gpm,
        "smi_util": [r[1] for r in dmon_rows(u_out) if len(r) > 1],
        "smi_gpm_sm": [r[1] for r in dmon_rows(gpm_out) if len(r) > 1],
        "smi_watts": watts,
    }
    print(f"--- {name}: {result}", flush=True)
    if not result["smi_gpm_sm"]:
        print(f"    nvidia-smi dmon --gpm-metrics said: {gpm_out.strip()[:300]}")
    return result


def matmuls(stop: threading.Event) -> None:
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(0)


def tiny_kernels(stop: threading.Event) -> None:
    with torch.cuda.device(0):
        while not stop.is_set():
            for _ in range(10):
                # NB: one thread spinning on one SM, back to back: NVML says 100% utilised
                torch.cuda._sleep(50_000_000)
            torch.cuda.synchronize(0)


def mean(xs: list[float | None]) -> float:
    vals = [x for x in xs if x is not None]
    return statistics.mean(vals) if vals else float("nan")


def main() -> int:
    idle = phase("idle", None)
    busy = phase("matmul", matmuls)
    tiny = phase("tiny kernels", tiny_kernels)
    for name, r in (("idle", idle), ("matmul", busy), ("tiny kernels", tiny)):
        ours, theirs = mean(r["power_avg_w"]), mean(r["smi_watts"])
        check(
            abs(ours - theirs) <= max(25.0, 0.2 * theirs),
            f"{name}: mean power from the energy counter {ours:.0f} W vs nvidia-smi "
            f"power.draw {theirs:.0f} W",
        )
        util = mean(r["smi_util"])
        check(
            abs(float(r["util"]) - util) <= 20,
            f"{name}: utilisation {r['util']:.0f}% vs nvidia-smi dmon -s u {util:.0f}%",
        )
    check(float(busy["energy_j"] or 0) > 0, f"matmul: energy used {busy['energy_j']} J")
    if not busy["gpm"]:
        print("GPU 0 has no GPM: SM activity not checked (utilisation is what gpuwatch shows)")
        return 1 if failed else 0
    busy_sm, idle_sm, tiny_sm = (mean(r["sm_active"]) for r in (busy, idle, tiny))
    check(busy_sm >= 60, f"matmul: SM activity {busy_sm:.0f}% (>= 60)")
    check(idle_sm <= 5, f"idle: SM activity {idle_sm:.0f}% (<= 5)")
    check(
        tiny_sm < 20 and float(tiny["util"]) >= 80,
        f"tiny kernels: utilisation {tiny['util']:.0f}% but SM activity {tiny_sm:.0f}%",
    )
    check(any(tiny["low_sm"]), "tiny kernels: flagged LOW SM ACTIVITY")
    check(not any(busy["low_sm"]), "matmul: not flagged")
    for name, r, ours in (("matmul", busy, busy_sm), ("tiny kernels", tiny, tiny_sm)):
        theirs = mean(r["smi_gpm_sm"])
        if theirs == theirs:  # not NaN: this nvidia-smi has --gpm-metrics
            check(
                abs(ours - theirs) <= 15,
                f"{name}: SM activity {ours:.0f}% vs nvidia-smi dmon --gpm-metrics 2 {theirs:.0f}%",
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
