"""What ``--fake-cuda`` costs with real values, against the same script run plainly on the CPU.

    python benchmarks/fake_values.py [--rounds 5] [--steps 20] [--width 64] [--layers 2]

Workload: ``demos/tiny_gpt.py`` (a nanoGPT-like character model: forward, backward, AdamW,
evaluations reading losses back with ``.item()``), in this process, with ``--quiet``. Variants,
each run once per round in turn (the median round counts):

* ``plain``: the script on the CPU, no gpuwatch (what ``python demos/tiny_gpt.py`` does here);
* ``real``: the script under ``--fake-cuda --fake-values real`` and the profiler as the CLI
  builds it for ``--fake-cuda`` (every op through the dispatch mode, op counts kept);
* ``placeholder``: the same with ``--fake-values placeholder`` (fake tensors, no values).

The goal for ``real`` is at most 1.5x ``plain``, the profiler included. Intra-op threads are set
to 1 so that two variants are not told apart by how many cores the box gave each.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "demos"))

import tiny_gpt  # noqa: E402

import profilers  # noqa: E402
from profilers.fake_cuda.harness import fake_cuda, install_guard  # noqa: E402


@contextlib.contextmanager
def plain() -> Iterator[None]:
    yield


@contextlib.contextmanager
def simulated(values: str) -> Iterator[None]:
    with fake_cuda(1, values=values), profilers.profile(kernel_timing=False, count_ops=True):
        yield


def timed(variant: Callable[[], contextlib.AbstractContextManager[None]], argv: list[str]) -> float:
    gc.collect()
    start = time.perf_counter()
    with variant():
        tiny_gpt.main(argv)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--skip-placeholder", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    install_guard()
    argv = [
        "--quiet",
        f"--steps={args.steps}",
        f"--eval-every={args.steps}",
        "--eval-iters=2",
        f"--width={args.width}",
        f"--layers={args.layers}",
        f"--batch={args.batch}",
        f"--block={args.block}",
    ]
    variants: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
        "plain": plain,
        "real": lambda: simulated("real"),
    }
    if not args.skip_placeholder:
        variants["placeholder"] = lambda: simulated("placeholder")
    for variant in variants.values():  # warm-up: imports, the guard, first-op caches
        timed(variant, argv)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, variant in variants.items():
            times[name].append(timed(variant, argv))
    base = statistics.median(times["plain"])
    print(
        f"tiny_gpt: {args.steps} steps, width {args.width}, {args.layers} layers, "
        f"batch {args.batch}x{args.block}; median of {args.rounds} rounds"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = f"{min(ts):.3f}-{max(ts):.3f}"
        print(f"  {name:12s} {med:8.3f} s  ({spread})  {med / base:5.2f}x plain")


if __name__ == "__main__":
    main()
