"""What the replay of a step (profilers/timing/replay.py) and the what-if ranking
(profilers/timing/whatif.py) cost, on a synthetic 10,000-op training step.

    python benchmarks/bench_replay.py [--ops 10000] [--rounds 7]

The step: an input wait, then ops over 40 lines in the mix of a training step: kernels on two
streams (one event between them every 100 ops), a blocking pageable copy and a float32 pinned
copy every 500 ops, an ``.item()`` every 1,000, a device sync at the end. Reported: the median
of ``--rounds`` for one replay (goal: under 50 ms for 10,000 ops), for the unprofiled replay,
for ranking every what-if the step allows (each one replayed, sync deferrals over 10
chained steps, then all of them together), and for a prediction's ranges (that ranking again
at the four corners of the host's and the GPU model's ranges: profilers/timing/uncertainty.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profilers.timing.gpu_model.specs import gpu_spec  # noqa: E402
from profilers.timing.gpu_model.validation import error_of  # noqa: E402
from profilers.timing.replay import (  # noqa: E402
    D2H,
    DEVICE,
    H2D,
    INPUT,
    KERNEL,
    RECORD,
    SYNC,
    WAIT,
    ReplayOp,
    replay,
)
from profilers.timing.uncertainty import Parts, scaled  # noqa: E402
from profilers.timing.whatif import rank  # noqa: E402


def step(n_ops: int) -> list[ReplayOp]:
    ops = [ReplayOp(INPUT, "train.py:40", 2_000, wait_ns=5_000_000)]
    for i in range(n_ops - 2):
        line = f"model.py:{10 + i % 40}"
        if i % 1000 == 999:
            ops.append(ReplayOp(D2H, "train.py:52", 4_000, gpu_ns=3_000, nbytes=4, sync="item"))
        elif i % 500 == 250:
            ops.append(
                ReplayOp(H2D, "train.py:44", 6_000, gpu_ns=90_000, nbytes=1 << 20, dtype="float32")
            )
        elif i % 500 == 0:
            ops.append(
                ReplayOp(
                    H2D,
                    "train.py:45",
                    3_000,
                    stream=1,
                    gpu_ns=40_000,
                    nbytes=1 << 20,
                    dtype="float32",
                    pinned=True,
                    non_blocking=True,
                )
            )
        elif i % 100 == 50:
            ops.append(ReplayOp(RECORD, line, 1_000, stream=1, event=i))
            ops.append(ReplayOp(WAIT, line, 1_000, stream=0, event=i))
        else:
            stream = 1 if i % 7 == 0 else 0
            ops.append(ReplayOp(KERNEL, line, 6_000, stream=stream, gpu_ns=4_000 + (i % 5) * 1_000))
    ops.append(ReplayOp(SYNC, "train.py:60", 2_000, stream=DEVICE, sync="synchronize"))
    return ops[:n_ops]


def timed(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ops = step(args.ops)
    once = timed(lambda: replay(ops), args.rounds)
    bare = timed(lambda: replay(ops, drop_overhead=True), args.rounds)
    ranking = rank(ops)
    ranked = timed(lambda: rank(ops), max(1, args.rounds // 2))
    # a prediction's ranges (issue 44): every what-if again at the four corners of the host's
    # range (x0.8-1.5 here) and the GPU model's (the H100's stated error)
    spec = gpu_spec("H100")
    parts = Parts([0.8, 1.0, 1.5], replay(ops).busy_ns, error_of(spec.name))

    def corners() -> None:
        for h, g in parts.corners():
            rank(scaled(ops, h, g), gpu=spec)

    ranged = timed(corners, max(1, args.rounds // 2))
    r = replay(ops)
    print(f"ops per step:                 {len(ops):,}")
    print(f"step replayed:                {r.wall_ns / 1e6:.3f} ms (busy {r.busy_ns / 1e6:.3f})")
    print(f"one replay:                   {once:.1f} ms  ({once * 1e3 / len(ops):.2f} µs/op)")
    print(f"one replay, unprofiled:       {bare:.1f} ms")
    print(f"rank all what-ifs:            {ranked:.1f} ms  ({len(ranking.savings)} what-ifs)")
    for s in ranking.savings:
        w = s.whatif
        print(f"  {w.kind:20} {w.line:14} saves {s.saving_ns / 1e6:8.3f} ms ({s.share:6.1%})")
    print(f"  sum {ranking.sum_ns / 1e6:.3f} ms, all together {ranking.combined_ns / 1e6:.3f} ms")
    print(f"a prediction's ranges:        {ranged:.1f} ms  (the ranking at 4 corners)")


if __name__ == "__main__":
    main()
