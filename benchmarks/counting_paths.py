"""Ways to count copies and syncs, per op, side by side in one process (issue: "only pay for what
you count").

    python benchmarks/counting_paths.py [--steps 50] [--rounds 11] [--device cpu|cuda]

Workloads: ``mlp``, a small MLP training step (95 ops, none of which copies: the worst case for
any per-op profiler), and ``mlp+item``, the same step logging its loss with ``loss.item()`` and
casting a batch with ``.to(torch.float64)`` as training loops do (two counted ops a step).
Each round runs every variant once, in turn; the median round counts. Overhead per op =
(variant's time in the loop - plain time) / ops per run (ops as a dispatch mode sees them); what
entering and leaving costs (once per run) is printed apart.

Variants:
* a bare no-op ``TorchDispatchMode``: every op enters Python (the floor of gpuwatch's mode);
* a no-op ``TorchFunctionMode``: every Python-level torch call enters Python (sees neither the
  ops torch calls inside, nor backward, nor ops from C++);
* ``PreDispatch`` switched on with no kernels: the cost of the key's own C++ fallback, paid by
  every op when nothing else is registered (why the fast path registers fallthroughs);
* gpuwatch counting every op (``kernel_timing=False, count_ops=True``: the dispatch mode);
* gpuwatch's fast path (``kernel_timing=False``): Python kernels for the counted ops only;
* ``torch.profiler.profile(activities=[CPU])``: its cost while the code runs (it records in C++
  through RecordFunction and pays at exit; that cost is printed apart). RecordFunction observers
  have no Python binding in torch 2.13 (``torch._C._autograd`` only clears them), so
  torch.profiler is how Python reaches them.
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
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_overhead import BareMode, make_step, warmed_loop  # noqa: E402

import profilers  # noqa: E402


class NoOpFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def with_item(step: Callable[[], torch.Tensor], device: str) -> Callable[[], None]:
    """The step, then what a training loop does around it: log the loss, cast a batch."""
    batch = torch.randn(32, 64, device=device)

    def run() -> None:
        loss = step()
        batch.to(torch.float64)
        loss.item()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for workload in ("mlp", "mlp+item"):
        base_step = make_step(args.device, "small")
        step = with_item(base_step, args.device) if workload == "mlp+item" else base_step
        loop, ops = warmed_loop(step, args.steps)
        contexts: dict[str, Callable[[], Any]] = {
            "plain": contextlib.nullcontext,
            "bare no-op TorchDispatchMode": BareMode,
            "no-op TorchFunctionMode": NoOpFunctionMode,
            "PreDispatch on, no kernels": lambda: torch._C._IncludeDispatchKeyGuard(
                torch._C.DispatchKey.PreDispatch
            ),
            "gpuwatch, every op (count_ops=True)": lambda: profilers.profile(
                kernel_timing=False, count_ops=True
            ),
            "gpuwatch fast path (kernel_timing=False)": lambda: profilers.profile(
                kernel_timing=False
            ),
            "torch.profiler, CPU activities": lambda: torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU]
            ),
        }
        in_loop: dict[str, list[float]] = {name: [] for name in contexts}
        edges: dict[str, list[float]] = {name: [] for name in contexts}
        for _ in range(args.rounds):
            for name, make in contexts.items():
                loop_s, edge_s = measured(make, loop, args.device)
                in_loop[name].append(loop_s)
                edges[name].append(edge_s)
        plain = statistics.median(in_loop["plain"])
        print(f"\n{workload} on {args.device}: {ops:,} ops per run ({args.steps} steps)")
        print("| variant | in the loop, median ms | vs plain | overhead per op | enter + exit |")
        print("| --- | --- | --- | --- | --- |")
        for name, samples in in_loop.items():
            m = statistics.median(samples)
            per_op = "-" if name == "plain" else f"{(m - plain) / ops * 1e6:.2f} µs"
            edge = statistics.median(edges[name]) * 1e3
            print(f"| {name} | {m * 1e3:.2f} | {m / plain:.2f}x | {per_op} | {edge:.1f} ms |")


def measured(make: Callable[[], Any], loop: Callable[[], None], device: str) -> tuple[float, float]:
    """Seconds in the loop, and seconds entering and leaving the context (torch.profiler pays
    most of its cost on leaving; gpuwatch's fast path registers its kernels on entering)."""
    gc.collect()  # see profiler_overhead.timed
    ctx = make()
    t0 = time.perf_counter()
    ctx.__enter__()
    t1 = time.perf_counter()
    loop()
    if device == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    ctx.__exit__(None, None, None)
    t3 = time.perf_counter()
    return t2 - t1, (t1 - t0) + (t3 - t2)


if __name__ == "__main__":
    main()
