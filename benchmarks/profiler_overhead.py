"""Per-op overhead of the gpuwatch profiler, side by side with its peers, in one process.

    python benchmarks/profiler_overhead.py [--steps 50] [--rounds 11] [--device cpu|cuda]
        [--workload small|large]

The workload is a training step of a small MLP (many small ops: the worst case for any per-op
profiler) or, with ``--workload large``, a GPU-bound step with big matrix products. Each round
runs every variant once, in turn, so drift hits all alike; the median round counts.

Variants: plain; a bare no-op TorchDispatchMode (the floor for this design, as anyone writes it:
torch wraps its __torch_dispatch__ so that dynamo never traces it); the same bare mode without
that wrapper (for reference: gpuwatch does the wrapper's job itself, cheaper); gpuwatch's
``profilers.profile()``, and the same with ``kernel_timing=False, count_ops=True`` (every op
still through the mode, untimed: what timing every op costs, host clocks on the CPU, two CUDA
events per op on a GPU); ``torch.profiler.profile(with_stack=True)``. Overhead per op = (variant
time - plain time) / ops per run. gpuwatch's rows are all-in: entering (its calibration),
leaving, and building the report (``prof.report()``) are in them; what that fixed part is,
and the loop alone, are printed apart. The fast path of ``kernel_timing=False`` (no op counts, no
mode) is measured against its peers in counting_paths.py.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import profilers  # noqa: E402


class BareMode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class BareModeUnwrapped(TorchDispatchMode):
    """The same without torch's dynamo-disabling wrapper around __torch_dispatch__ (unsafe under
    torch.compile as it stands: the floor of the floor, for reference)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class CountingMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))


def make_step(device: str, workload: str) -> Callable[[], torch.Tensor]:
    """One training step (it returns its loss, which it does not read)."""
    torch.manual_seed(0)
    if workload == "small":
        width, batch, depth = 64, 32, 4
    else:
        width, batch, depth = 4096, 4096, 4
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def warmed_loop(step: Callable[[], Any], steps: int) -> tuple[Callable[[], None], int]:
    """``steps`` steps in a row, after a warm-up (allocator, autograd graph caches), and the
    ops a run of them makes as a dispatch mode sees them."""
    for _ in range(3):
        step()

    def loop() -> None:
        for _ in range(steps):
            step()

    counter = CountingMode()
    with counter:
        loop()
    return loop, counter.ops


def timed(run_steps: Callable[[], float | None], device: str, inner: list[float]) -> float:
    # NB: every variant starts from a collected heap. Without it, a full collection (the
    # autograd graphs of earlier runs) lands inside whichever variant the allocation count
    # happens to reach it in, the same one each round: one object more or less anywhere moved
    # gpuwatch's figure from 1.2 to 1.8 times the bare mode. The collector stays on while a
    # variant runs, so what its own allocations cost is still counted.
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    loop_s = run_steps()
    if device == "cuda":
        torch.cuda.synchronize()
    if loop_s is not None:  # the loop alone, as the variant timed it inside itself
        inner.append(loop_s)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workload", choices=("small", "large"), default="small")
    args = ap.parse_args()
    torch.set_num_threads(1)
    loop, ops = warmed_loop(make_step(args.device, args.workload), args.steps)

    def plain() -> None:
        loop()

    def bare() -> None:
        with BareMode():
            loop()

    def bare_unwrapped() -> None:
        with BareModeUnwrapped():
            loop()

    def all_in(prof: profilers.Profile) -> float:
        with prof:
            t = time.perf_counter()
            loop()
            if args.device == "cuda":
                torch.cuda.synchronize()
            loop_s = time.perf_counter() - t
        prof.report()
        return loop_s

    def gpuwatch() -> float:
        return all_in(profilers.profile())

    def gpuwatch_untimed() -> float:
        return all_in(profilers.profile(kernel_timing=False, count_ops=True))

    def torch_profiler() -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if args.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities, with_stack=True):
            loop()

    variants: dict[str, Callable[[], float | None]] = {
        "plain": plain,
        "bare mode": bare,
        "bare mode, unwrapped": bare_unwrapped,
        "gpuwatch": gpuwatch,
        "gpuwatch, untimed (count_ops)": gpuwatch_untimed,
        "torch.profiler(with_stack)": torch_profiler,
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    inner: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            times[name].append(timed(fn, args.device, inner[name]))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["plain"]
    print(
        f"device={args.device} workload={args.workload} steps={args.steps} ops/run={ops} rounds={args.rounds}"
    )
    print(f"{'variant':<30} {'median s':>10} {'vs plain':>9} {'overhead/op':>12}")
    over = {}
    for name, t in med.items():
        over[name] = (t - base) / ops * 1e6
        print(f"{name:<30} {t:>10.4f} {t / base:>8.2f}x {over[name]:>10.2f}µs")
    print()
    print(
        f"gpuwatch overhead / bare mode overhead:      {over['gpuwatch'] / over['bare mode']:.2f}  (target <= 1.2)"
    )
    print(
        f"gpuwatch overhead / torch.profiler overhead: {over['gpuwatch'] / over['torch.profiler(with_stack)']:.2f}  (target <= 0.5)"
    )
    print(
        f"gpuwatch overhead / unwrapped bare overhead: {over['gpuwatch'] / over['bare mode, unwrapped']:.2f}  (reference)"
    )
    print(f"gpuwatch run time / plain run time:          {med['gpuwatch'] / base:.3f}")
    loop_only = (statistics.median(inner["gpuwatch"]) - base) / ops * 1e6
    fixed_ms = statistics.median(
        t - i for t, i in zip(times["gpuwatch"], inner["gpuwatch"], strict=True)
    )
    print(
        f"of which the loop alone: {loop_only:.2f}µs per op, {loop_only / over['bare mode']:.2f}x"
        f" the bare mode; entering, leaving and the report: {fixed_ms * 1e3:.1f} ms a run"
    )


if __name__ == "__main__":
    main()
