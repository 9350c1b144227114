"""What the sampler that names the host's long gaps (profilers/timing/gaps.py) costs a profiled
launch-bound loop, side by side in one process:

    python benchmarks/gap_sampler.py [--rounds 8] [--steps 30] [--slow 0.05 0.005 ...]
    python benchmarks/gap_sampler.py --fast-path [--slow 0.01 0.005 ...]

Each round profiles the same loop (200 small ops a step, ``torch.set_num_threads(1)``) through
the dispatch mode with the time view on: with the sampler off, then on with each ``--slow``
(its reading interval while ops flow: 0.05 s is gpuwatch's; 0.005 s reads as often as inside a
gap, all along); the median step of each variant over the rounds, and the ratio on/off. The
loop runs Python and ops back to back, so it always wants the GIL: the worst case for a thread
that takes it at every reading. A long sleep costs the sampler nothing (the GIL is free).

``--fast-path``: the same on the fast path (``kernel_timing=False``), where the sampler reads at
a steady rate (each ``--slow`` is that rate; 0.01 s is gpuwatch's), on a loop of tensor ops
with no Python number (``y = y + x``: nothing reaches Python, the fast path's best case and so
the sampler's worst).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import profilers
import profilers.session as _session
from profilers.timing import gaps


def _loop(steps: int, tensors: bool) -> float:
    x = torch.ones(8)
    t = time.perf_counter()
    for _ in range(steps):
        y = x
        if tensors:
            for _ in range(200):
                y = y + x
        else:
            for _ in range(200):
                y = y + 1
        profilers.step()
    return (time.perf_counter() - t) / steps * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--slow", type=float, nargs="+")
    ap.add_argument("--fast-path", action="store_true")
    a = ap.parse_args()
    if a.slow is None:
        a.slow = [gaps.FAST_PATH_S, 0.005] if a.fast_path else [gaps.SLOW_S, gaps.INTERVAL_S]
    torch.set_num_threads(1)
    real = gaps.sample_gaps
    variants: list[float | None] = [None, *a.slow]
    steps: dict[float | None, list[float]] = {v: [] for v in variants}
    try:
        for _ in range(a.rounds):
            for v in variants:
                if v is None:
                    _session.sample_gaps = lambda *args: None  # type: ignore[assignment]
                else:
                    gaps.SLOW_S = gaps.FAST_PATH_S = v
                    _session.sample_gaps = real
                with profilers.profile(kernel_timing=not a.fast_path):
                    steps[v].append(_loop(a.steps, a.fast_path))
    finally:
        _session.sample_gaps = real
    print(
        f"torch {torch.__version__}; {'fast path' if a.fast_path else 'dispatch mode'}; "
        f"{a.rounds} rounds of {a.steps} steps, 200 ops a step; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    off = statistics.median(steps[None])
    print(f"  sampler off            {off:7.3f} ms a step")
    for v in a.slow:
        on = statistics.median(steps[v])
        print(
            f"  sampler, ops flowing: every {v * 1000:4.1f} ms  {on:7.3f} ms a step  {on / off:.3f}x"
        )


if __name__ == "__main__":
    main()
