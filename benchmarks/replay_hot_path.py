"""What the what-if replay's records cost the default path, per op, side by side in one process.

    python benchmarks/replay_hot_path.py [--steps 30] [--rounds 9]

The replay (profilers/timing/oplog.py, read by ``--what-if`` and ``--gpu NAME``) keeps a record
of every op that runs on a GPU. This measures the dispatch mode's cost per op, on the small MLP
training step of profiler_overhead.py (95 ops a step), in three families, each against its own
plain run and a bare no-op ``TorchDispatchMode`` (the peer: the floor for this design):

* CPU: host tensors, ``profilers.profile()`` (host-timed): ``gpuwatch profile`` on a machine
  without a GPU.
* stand-in GPU: the same host tensors, taken for a GPU's by a stand-in CUDA API whose events cost
  nothing (:class:`StandInGpu`): the profiler's path on a GPU (two events per op, the GPU
  timeline, and, before the replay was made opt-in, a replay record per op), without the GPU's
  own cost. ``profilers.profile(cuda=...)``, then the same with ``what_if=True`` where the tree
  has it (``--what-if``: the records kept, for reference).
* fake GPU: the step on ``--fake-cuda``'s simulated GPU (the plain run and the bare mode inside
  it too), profiled as ``gpuwatch profile --fake-cuda`` does; then with ``gpu="H100"``
  (``--gpu H100``: the records kept, the model's time per op) for reference.

Then the same per op counted rather than timed (hot_path_work.py's counts: Python calls, C calls
and bytecodes run in ``profilers/``), for the CPU and stand-in GPU profiles: figures a loaded
machine does not move.

Each round runs every variant once, in turn, so drift hits all alike; the median round counts.
Times are the process's CPU time (every thread's: autograd's device threads run the fake GPU's
backward), not the wall clock: on a shared machine a wall clock counts the time the process
waited for a core. Overhead per op = (variant - its family's plain run) / ops. Run it on two trees (before and after
a change) and compare the ratios to the bare mode: on a shared 2-core machine the absolute
figures move by tens of percent, the ratios much less. The load average is printed.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hot_path_work import _count  # noqa: E402
from profiler_overhead import BareMode, make_step, warmed_loop  # noqa: E402

import profilers  # noqa: E402
from gpuwatch.profile.options import ProfileOptions, profiler_keywords  # noqa: E402
from profilers.fake_cuda.harness import fake_cuda  # noqa: E402
from profilers.timing.cuda_events import TorchCuda  # noqa: E402

HAS_WHAT_IF = "what_if" in inspect.signature(profilers.profile).parameters
"""Whether this tree's profiler takes ``what_if`` (before it did, the replay always ran)."""


class _Event:
    """A CUDA event that has always completed, 10 us after any other."""

    __slots__ = ()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Any) -> float:
        return 0.01


class StandInGpu(TorchCuda):
    """Every op on a tensor runs on "GPU 0", one stream; recording an event does nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.stream = object()
        self.record = lambda event, stream: None

    def stream_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int] | None:
        a0 = args[0] if args else None
        if type(a0) in (list, tuple) and a0:
            a0 = a0[0]
        return (self.stream, 0) if isinstance(a0, torch.Tensor) else None

    def current_device(self) -> int:
        return 0

    def new_event(self) -> Any:
        return _Event()

    def synchronize(self, device: int) -> None:
        pass


def timed(run: Callable[[], None]) -> float:
    """Seconds of the process's CPU time ``run`` takes, from a collected heap (as
    profiler_overhead.py's ``timed``: a collection of earlier runs' graphs lands in no one
    variant's figure)."""
    gc.collect()
    t = time.process_time_ns()
    run()
    return (time.process_time_ns() - t) / 1e9


def _family(loop: Callable[[], None], profiles: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """The variants of one family: its plain run, the bare mode, and each profile around it."""

    def plain() -> None:
        loop()

    def bare() -> None:
        with BareMode():
            loop()

    out: dict[str, Callable[[], None]] = {"plain": plain, "bare mode": bare}
    for name, make in profiles.items():

        def run(make: Callable[[], Any] = make) -> None:
            with make():
                loop()

        out[name] = run
    return out


def _report(title: str, ops: int, times: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["plain"]
    over = {k: (t - base) / ops * 1e6 for k, t in med.items()}
    bare = over["bare mode"]
    print(f"\n{title} ({ops:,} ops per run)")
    print(f"  {'variant':<34} {'median s':>9} {'overhead/op':>12} {'vs bare mode':>13}")
    for name, t in med.items():
        ratio = f"{over[name] / bare:.2f}x" if name != "plain" and bare > 0 else "-"
        print(f"  {name:<34} {t:>9.4f} {over[name]:>10.2f}us {ratio:>13}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}; profiler takes what_if: {HAS_WHAT_IF}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {args.rounds} rounds"
    )

    # NB: the fake GPU first: autograd sizes its device queues on its first backward
    keywords = profiler_keywords(ProfileOptions(fake_cuda=True))
    with fake_cuda():
        floop, fops = warmed_loop(make_step("cuda", "small"), max(1, args.steps // 3))
        fake = _family(
            floop,
            {
                "gpuwatch, default (--fake-cuda)": lambda: profilers.profile(**keywords),
                "gpuwatch, gpu=H100 (--gpu H100)": lambda: profilers.profile(
                    **{**keywords, "gpu": "H100"}
                ),
            },
        )
        ftimes: dict[str, list[float]] = {k: [] for k in fake}
        for _ in range(args.rounds):
            for name, fn in fake.items():
                ftimes[name].append(timed(fn))
    _report("fake GPU (--fake-cuda)", fops, ftimes)
    loop, ops = warmed_loop(make_step("cpu", "small"), args.steps)
    gpu_default: Callable[[], Any] = lambda: profilers.profile(cuda=StandInGpu())  # noqa: E731
    stand_in = {"gpuwatch, default": gpu_default}
    if HAS_WHAT_IF:
        stand_in["gpuwatch, what_if=True (--what-if)"] = lambda: profilers.profile(
            cuda=StandInGpu(), what_if=True
        )
    families = {
        "CPU": _family(loop, {"gpuwatch, default": lambda: profilers.profile()}),
        "stand-in GPU (the GPU path, events free)": _family(loop, stand_in),
    }
    results: dict[str, dict[str, list[float]]] = {
        t: {k: [] for k in f} for t, f in families.items()
    }
    for _ in range(args.rounds):
        for title, family in families.items():
            for name, fn in family.items():
                results[title][name].append(timed(fn))
    for title in families:
        _report(title, ops, results[title])

    print("\nper op, counted: Python calls, C calls, bytecodes run in profilers/")
    counted = {"CPU, default": lambda: profilers.profile(), "stand-in GPU, default": gpu_default}
    if HAS_WHAT_IF:
        counted["stand-in GPU, what_if=True"] = stand_in["gpuwatch, what_if=True (--what-if)"]
    for name, make in counted.items():
        c = _count(loop, make)
        print(
            f"  {name:<34} {c['call'] / ops:6.2f} {c['c_call'] / ops:6.2f} "
            f"{c['bytecode'] / ops:7.1f}"
        )
    print(f"\n(load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
