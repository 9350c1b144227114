"""Under ``--fake-cuda --gpu NAME`` the GPU half is predicted and the host half measured: is the
measured host time the script's own, or the fake GPU's? Side by side, in one process:

    python benchmarks/fake_host_time.py [--steps 12] [--batch 64] [--size 32] [--rounds 3]

* predicted: the single-GPU demo's naive loop under the fake GPU (real values: the CPU
  computes every GPU op) and ``profilers.profile(gpu="H100")``, at the demo's size
  (``--batch``/``--size``: 64 images of 32x32); the host time the replay uses for the typical
  step unprofiled (each record's host time less the profiler's share, the medians over the kept
  steps), per recorded GPU op;
* plain: the same loop on the CPU with no profiler and no fake GPU, at a size where the CPU's
  compute is small (4 images of 8x8), its step time (CPU time of the thread) per op of the
  predicted run: the host's Python and dispatch (and the CPU's small kernels, which the
  prediction replaces by a 5 us launch per GPU op). NB: taking the kernels out of it was
  tried with a timing dispatch mode and with torch.profiler; both time an op with their own
  per-op cost inside, which on this loop is as large as the host's Python itself.

The goal (under the fake GPU the host half is measured for real): the predicted host time per op
within a stated factor of the plain one. Medians over rounds; the load average is printed (a
shared 2-core machine moves every figure here by tens of percent).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "demos"))
from _common import synthetic_images  # noqa: E402
from single_gpu_training import train_naive  # noqa: E402

import profilers  # noqa: E402
from profilers.fake_cuda.harness import fake_cuda  # noqa: E402
from profilers.timing.replayed import typical  # noqa: E402


def plain_step_ns(images: torch.Tensor, labels: torch.Tensor, steps: int, batch: int) -> float:
    """The CPU loop's CPU time per step (its thread's: the fairest on a shared machine)."""
    with redirect_stdout(io.StringIO()):
        train_naive(images, labels, torch.device("cpu"), 2, batch, 1)  # warm
        t = time.thread_time_ns()
        train_naive(images, labels, torch.device("cpu"), steps, batch, 1)
    return (time.thread_time_ns() - t) / steps


def predicted_host(
    images: torch.Tensor, labels: torch.Tensor, steps: int, batch: int
) -> tuple[float, int, float]:
    """The typical step's unprofiled host ns (the replay's input), its GPU ops, and the
    profiler's share that was taken out of it."""
    with redirect_stdout(io.StringIO()), fake_cuda():
        with profilers.profile(gpu="H100") as prof:
            train_naive(images, labels, torch.device("cuda"), steps, batch, 1)
        log = prof._log  # noqa: SLF001  # the run's replay records
    assert log is not None
    found = typical(list(log.steps))
    assert found is not None
    _step, ops, _n = found
    host = sum(op.host_ns - op.overhead_ns for op in ops)
    own = sum(op.overhead_ns for op in ops)
    gpu_ops = sum(1 for op in ops if op.kind not in ("input", "comm", "sync"))
    return host, gpu_ops, own


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    images, labels = synthetic_images(args.steps * args.batch, args.size)
    small = synthetic_images(args.steps * 4, 8)
    print(
        f"torch {torch.__version__}; demos/single_gpu_training.py naive, batch {args.batch}, "
        f"size {args.size}, {args.steps} steps; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs; medians of {args.rounds} rounds"
    )
    plain, pred, own, n_ops = [], [], [], 0
    for _ in range(args.rounds):
        # NB: the fake GPU first: autograd sizes its device queues on its first backward
        host, n_ops, taken = predicted_host(images, labels, args.steps, args.batch)
        pred.append(host)
        own.append(taken)
        plain.append(plain_step_ns(*small, args.steps, 4))
    p, h, o = statistics.median(plain), statistics.median(pred), statistics.median(own)
    print(f"  GPU ops per step (the fake run's records): {n_ops}")
    print(f"  plain CPU run:       {p / 1e3:8.1f} us per step, {p / n_ops / 1e3:6.1f} us per op")
    print(
        f"  PREDICTED host time: {h / 1e3:8.1f} us per step, {h / n_ops / 1e3:6.1f} us per op "
        f"({h / p:.2f}x plain); the profiler's own taken out: {o / n_ops / 1e3:.1f} us per op"
    )
    print(f"  (load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
