"""What tracking memory per line costs beside the counting it rides on (were
tracking every tensor to cost more than the counting path, it would have to be an option).

    python benchmarks/memory_tracking.py [--steps 50] [--rounds 11] [--device cpu|cuda] [--fake]

Workload: the small MLP training step of ``profiler_overhead.py`` (95 ops a step, most of them
making a new tensor: the worst case for a tracker that notes each new storage). Each round runs
every variant once, in turn; the median round counts. Variants:

* plain;
* gpuwatch counting every op through the dispatch mode (``kernel_timing=False,
  count_ops=True``), the path ``--memory`` rides on;
* the same with ``memory=True`` (``--memory``): each op's new storages noted with a weak
  reference, GPU bytes per line;
* with ``--fake``, the same two on ``--fake-cuda``'s simulated GPU, where tracking is on by
  default (``memory=None``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_overhead import make_step, warmed_loop  # noqa: E402

import profilers  # noqa: E402


def measured(make: Callable[[], Any], loop: Callable[[], None], device: str) -> float:
    """Seconds in the loop, from a collected heap (see profiler_overhead.timed)."""
    gc.collect()
    with make():
        t = time.perf_counter()
        loop()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t


def table(
    title: str, variants: dict[str, Callable[[], Any]], loop: Any, ops: int, args: Any
) -> None:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, make in variants.items():
            samples[name].append(measured(make, loop, args.device))
    base = next(iter(variants))
    first = statistics.median(samples[base])
    print(f"\n{title}: {ops:,} ops per run ({args.steps} steps)")
    print(f"| variant | median ms | vs {base} | per op beside it |")
    print("| --- | --- | --- | --- |")
    for name, values in samples.items():
        m = statistics.median(values)
        per_op = "-" if name == base else f"{(m - first) / ops * 1e6:.2f} µs"
        print(f"| {name} | {m * 1e3:.2f} | {m / first:.2f}x | {per_op} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--fake", action="store_true", help="also on --fake-cuda's simulated GPU")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.fake:
        from profilers.fake_cuda.harness import install_guard

        install_guard()  # NB: before the first backward (autograd sizes its device threads then)
    loop, ops = warmed_loop(make_step(args.device, "small"), args.steps)
    table(
        f"MLP step on {args.device}",
        {
            "plain": contextlib.nullcontext,
            "gpuwatch counting every op": lambda: profilers.profile(
                kernel_timing=False, count_ops=True, memory=False
            ),
            "gpuwatch counting every op + --memory": lambda: profilers.profile(
                kernel_timing=False, count_ops=True, memory=True
            ),
        },
        loop,
        ops,
        args,
    )
    if not args.fake:
        return
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda():
        fake_args = argparse.Namespace(**{**vars(args), "device": "cuda:0", "rounds": 5})
        fake_loop, fake_ops = warmed_loop(make_step("cuda:0", "small"), args.steps)
        table(
            "MLP step on the simulated GPU (--fake-cuda)",
            {
                "gpuwatch --fake-cuda, memory off": lambda: profilers.profile(
                    kernel_timing=False, count_ops=True, memory=False
                ),
                "gpuwatch --fake-cuda (memory tracked: the default)": lambda: profilers.profile(
                    kernel_timing=False, count_ops=True
                ),
            },
            fake_loop,
            fake_ops,
            fake_args,
        )


if __name__ == "__main__":
    main()
