"""Energy per step on a real GPU (issue 30): ``python3 .ci/check_energy.py`` (run by
``.ci/gpu_checks.sh run``).

A script of STEPS steps, each one ``torch.cuda._sleep`` of about STEP_S seconds of GPU work (the
length calibrated with CUDA events first) then a synchronize, runs under ``gpuwatch profile``; the
script itself reads NVML's energy counter directly at each step's boundary (right after
``profilers.step()``). gpuwatch's joules per step (``time.steps[].energy.j``, the counter read
every 20 ms by its timeline and interpolated between changes) must agree with the direct reads.

NB: the tolerance. Both sides see a counter that moves in steps: each direct read is late by up
to one of the counter's updates (``counter_update_ms``, at the step's mean power), and gpuwatch's
figure is uncertain by ``uncertainty_j``. A step passes when the two differ by at most 10% of
the direct figure, or by less than gpuwatch's uncertainty plus two counter updates at the step's
mean power; the median step must agree within 5%. Exit code 1 when a check fails.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

STEPS = 8
STEP_S = 1.0
failed: list[str] = []

SCRIPT = """\
import json, time
import pynvml, torch
import profilers

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda._sleep(1_000_000)  # warm up
start.record(); torch.cuda._sleep(100_000_000); end.record(); torch.cuda.synchronize()
cycles = int(100_000_000 * {step_s} * 1000 / start.elapsed_time(end))
reads = []
for _ in range({steps}):
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    profilers.step()
    reads.append(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
json.dump({{"reads_mj": reads, "cycles": cycles}}, open({reads!r}, "w"))
"""


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failed.append(what)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="gpuwatch-energy-"))
    reads_path, report_path = tmp / "reads.json", tmp / "energy.json"
    script = tmp / "steps.py"
    script.write_text(
        textwrap.dedent(SCRIPT.format(step_s=STEP_S, steps=STEPS, reads=str(reads_path)))
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}  # NVML index 0 is CUDA's device 0
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "profile",
            "-q",
            "--json",
            str(report_path),
            str(script),
        ],
        env=env,
        check=False,
    )
    check(done.returncode == 0, f"gpuwatch profile exit code {done.returncode}")
    if done.returncode != 0:
        return 1
    report = json.loads(report_path.read_text())
    direct_mj = json.loads(reads_path.read_text())["reads_mj"]
    energy = report["time"].get("energy") or {}
    print(json.dumps(energy, indent=1))
    check(energy.get("gpus") == [0], f"energy on the GPU used: {energy.get('gpus')}")
    update_ms = float(energy.get("counter_update_ms") or 0.0)
    steps = {s["step"]: s for s in report["time"]["steps"]}
    ours, theirs = [], []
    for k in range(1, STEPS):  # step k lies between the direct reads k-1 and k
        step = steps.get(k)
        if step is None or (step.get("energy") or {}).get("j") is None:
            check(False, f"step {k}: no energy in the report ({step and step.get('energy')})")
            continue
        e = step["energy"]
        direct = (direct_mj[k] - direct_mj[k - 1]) / 1000.0
        wall_s = (step["end_ms"] - step["start_ms"]) / 1000.0
        slack = e["uncertainty_j"] + 2 * update_ms / 1000.0 * (direct / wall_s)
        ok = abs(e["j"] - direct) <= max(0.10 * direct, slack)
        check(ok, f"step {k}: {e['j']:.1f} J vs {direct:.1f} J read directly ({wall_s:.3f} s)")
        ours.append(e["j"])
        theirs.append(direct)
    if ours:
        a, b = statistics.median(ours), statistics.median(theirs)
        check(abs(a - b) <= 0.05 * b, f"median step: {a:.1f} J vs {b:.1f} J read directly")
    idle = [s["energy"].get("idle_basis") for s in steps.values() if s.get("energy")]
    print(f"idle joules: {sorted(set(filter(None, idle)))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
