"""The time view against torch.profiler, side by side in one process: what each costs
on the same steps, and what each says about them.

    python benchmarks/time_vs_torch_profiler.py --device cpu   # CPU activities
    python benchmarks/time_vs_torch_profiler.py --device cuda  # CPU + CUDA activities (a GPU)

Workloads (each step ended by ``profilers.step()``, which torch.profiler ignores):
* ``launch``: 100 small ops a step (200 op calls), launch-bound: the worst case for any per-op
  profiler; on a GPU the step ends with an ``.item()``;
* ``launch_tensors``: the same with tensors in the numbers' place (``y * s + b``): on the CPU,
  a Python number's cast is a call the fast path takes (it is not, on a GPU);
* ``gpu`` (``--device cuda`` only): a 4096x4096 matmul chain and an ``.item()``: GPU-bound.

Per round every variant runs once, in turn; the median round counts. NB: on a machine shared
with other work the wall clock is preempted; the CPU time (this thread's per step, the process's
for the run) is the fair measure of what each tool costs, and is printed beside it. Variants: the plain loop;
gpuwatch's time view (``profilers.profile()``: counting, host timeline and, on a GPU, the GPU
half from CUDA events); the same on the fast path (``kernel_timing=False``: the counted ops'
waits, the other lines from the stack sampler; no GPU half); torch.profiler with the activities of the device. Reported per variant:
the median step while the loop runs, and the run's total with the end of the profile (gpuwatch's
report, torch.profiler's ``key_averages()``, which is where it processes its events); then
gpuwatch's cost over torch.profiler's, as ratios (the issue's aim: about 1x), and each tool's
view of the step: gpuwatch's verdict and GPU busy/idle, torch.profiler's summed device time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import profilers  # noqa: E402

Loop = Callable[[int, list[float]], None]

CPU: list[float] = []
"""This thread's CPU ms per step, of the last run."""


def _launch(device: str, tensors: bool = False) -> Loop:
    def loop(steps: int, per_step: list[float]) -> None:
        x = torch.ones(8, device=device)
        s: Any = torch.full((8,), 1.0001, device=device) if tensors else 1.0001
        b: Any = torch.full((8,), 0.5, device=device) if tensors else 0.5
        CPU.clear()
        for _ in range(steps):
            t, c = time.perf_counter_ns(), time.thread_time_ns()
            y = x
            for _ in range(100):
                y = y * s + b
            if device == "cuda":
                y.sum().item()
            profilers.step()
            per_step.append((time.perf_counter_ns() - t) / 1e6)
            CPU.append((time.thread_time_ns() - c) / 1e6)

    return loop


def _gpu_bound(steps: int, per_step: list[float]) -> None:
    a = torch.randn(4096, 4096, device="cuda")
    CPU.clear()
    for _ in range(steps):
        t, c = time.perf_counter_ns(), time.thread_time_ns()
        y = a
        for _ in range(4):
            y = (y @ a) * 1e-3
        y[0, 0].item()
        profilers.step()
        per_step.append((time.perf_counter_ns() - t) / 1e6)
        CPU.append((time.thread_time_ns() - c) / 1e6)


def _measured(per_step: list[float], t: float, c: float) -> dict[str, Any]:
    return {
        "step_ms": statistics.median(per_step[1:]),
        "cpu_ms": statistics.median(CPU[1:]),
        "total_s": time.perf_counter() - t,
        "total_cpu_s": time.process_time() - c,
    }


def _plain(loop: Loop, steps: int) -> dict[str, Any]:
    per_step: list[float] = []
    t, c = time.perf_counter(), time.process_time()
    loop(steps, per_step)
    return _measured(per_step, t, c)


def _gpuwatch(loop: Loop, steps: int, fast: bool = False) -> dict[str, Any]:
    per_step: list[float] = []
    t, c = time.perf_counter(), time.process_time()
    with profilers.profile(kernel_timing=not fast) as prof:
        loop(steps, per_step)
    report = prof.report()
    tv = report.time or {}
    kept = tv.get("steps", [])[1:]
    gpu = [s["gpu"] for s in kept if s.get("gpu")]
    return {
        **_measured(per_step, t, c),
        "verdict": tv.get("run", {}).get("verdict"),
        "stated_ms": statistics.median(s["wall_unprofiled_ms"] for s in kept) if kept else None,
        "busy_ms": statistics.median(g["busy_ms"] for g in gpu) if gpu else None,
        "idle_ms": statistics.median(g["idle_total_ms"] for g in gpu) if gpu else None,
    }


def _torch_profiler(loop: Loop, steps: int, device: str) -> dict[str, Any]:
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    per_step: list[float] = []
    t, c = time.perf_counter(), time.process_time()
    with profile(activities=activities) as prof:
        loop(steps, per_step)
    events = prof.key_averages()
    # NB: torch 2.x names it device_time_total (cuda_time_total is the old name)
    device_us = sum(float(getattr(e, "self_device_time_total", 0.0)) for e in events)
    return {**_measured(per_step, t, c), "device_ms_per_step": device_us / 1000 / steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("time_vs_torch_profiler.py: --device cuda needs a CUDA GPU")
    device = args.device
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {name}, {args.rounds} rounds of {args.steps} steps")
    workloads: list[tuple[str, Loop]] = [
        ("launch", _launch(device)),
        ("launch_tensors", _launch(device, tensors=True)),
    ]
    if device == "cuda":
        workloads.append(("gpu", _gpu_bound))
    for label, loop in workloads:
        rows: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            rows.setdefault("plain", []).append(_plain(loop, args.steps))
            rows.setdefault("gpuwatch", []).append(_gpuwatch(loop, args.steps))
            rows.setdefault("fast path", []).append(_gpuwatch(loop, args.steps, fast=True))
            rows.setdefault("torch.profiler", []).append(_torch_profiler(loop, args.steps, device))
        med = {k: {f: _median(v, f) for f in v[0]} for k, v in rows.items()}
        plain = med["plain"]
        print(f"\n{label}:")
        for variant, m in med.items():
            print(
                f"  {variant:15s} step {m['step_ms']:8.3f} ms wall, {m['cpu_ms']:8.3f} ms CPU "
                f"({m['cpu_ms'] / plain['cpu_ms']:.2f}x plain)   run with its end "
                f"{m['total_s']:7.3f} s wall, {m['total_cpu_s']:7.3f} s CPU "
                f"({m['total_cpu_s'] / plain['total_cpu_s']:.2f}x plain)"
            )
        tp = med["torch.profiler"]
        for variant in ("gpuwatch", "fast path"):
            gw = med[variant]
            in_loop = (gw["cpu_ms"] - plain["cpu_ms"]) / max(1e-9, tp["cpu_ms"] - plain["cpu_ms"])
            print(
                f"  {variant} / torch.profiler (CPU time): step {gw['cpu_ms'] / tp['cpu_ms']:.2f}x, "
                f"run with its end {gw['total_cpu_s'] / tp['total_cpu_s']:.2f}x; "
                f"added cost in the loop {in_loop:.2f}x; "
                f"stated unprofiled step {gw['stated_ms']:.3f} ms "
                f"({gw['stated_ms'] / plain['step_ms']:.2f}x plain)"
            )
        gw = med["gpuwatch"]
        said = f"  gpuwatch says {rows['gpuwatch'][0]['verdict']}"
        if gw.get("busy_ms") is not None:
            said += f", GPU busy {gw['busy_ms']:.3f} ms, idle {gw['idle_ms']:.3f} ms a step"
        if device == "cuda":
            said += f"; torch.profiler: device time {tp['device_ms_per_step']:.3f} ms a step"
        print(said)


def _median(rows: list[dict[str, Any]], field: str) -> Any:
    values = [r[field] for r in rows if isinstance(r.get(field), int | float)]
    return statistics.median(values) if values else rows[0].get(field)


if __name__ == "__main__":
    main()
