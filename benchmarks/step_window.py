"""What ``--steps A:B`` costs on a long run: a 10-step window in a 3,000-step launch-bound loop
against the plain loop and against profiling every step, side by side in one process.

    python benchmarks/step_window.py [--steps 3000] [--rounds 3]

Goal: the window costs at most 10% over the plain loop. Outside the window the
dispatch mode is off the stack; what remains is the optimizer step hook and the patched entry
points (a Python call each).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import profilers  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)

    def loop() -> None:
        for _ in range(args.steps):
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()

    mid = args.steps // 3
    window = (mid, mid + 10)
    variants = {
        "plain": loop,
        f"--steps {mid}:{mid + 10}": lambda: _profiled(loop, window),
        "every step": lambda: _profiled(loop, None),
        # --no-kernel-timing: the fast path (only the ops that copy or sync reach Python)
        f"--steps {mid}:{mid + 10}, counting only": lambda: _profiled(loop, window, False),
        "every step, counting only": lambda: _profiled(loop, None, False),
    }
    loop()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["plain"])
    print(f"{args.steps} steps, median of {args.rounds} rounds (torch {torch.__version__})")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<37} {med:7.3f} s  {med / base:5.2f}x the plain loop")


def _profiled(loop: object, steps: tuple[int, int] | None, kernel_timing: bool = True) -> None:
    with profilers.profile(steps=steps, kernel_timing=kernel_timing):
        loop()  # type: ignore[operator]


if __name__ == "__main__":
    main()
