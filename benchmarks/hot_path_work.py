"""The profiler's own work per op, counted rather than timed: a check that a change to the hot path
costs nothing, which holds on a loaded machine where timings move by tens of percent.

    python benchmarks/hot_path_work.py [--steps 5]

For the small MLP training step of profiler_overhead.py (95 ops a step), per op as a dispatch
mode sees them: Python function calls and C calls (``sys.setprofile`` events) made while the
profile runs, and bytecode instructions executed in ``profilers/`` code (``sys.settrace``
opcode events), for gpuwatch's ``profilers.profile()`` (the mode, host-timed on a CPU), the mode
untimed (``count_ops=True``) and the fast path (``kernel_timing=False``). Run it on two trees
(a branch and main) and compare: a call more per op is about a dict lookup's worth of time.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_overhead import make_step, warmed_loop  # noqa: E402

import profilers  # noqa: E402


def _count(
    loop: Callable[[], None], make: Callable[[], AbstractContextManager[Any]]
) -> Counter[str]:
    counts: Counter[str] = Counter()

    def on_event(frame: FrameType, event: str, arg: Any) -> None:
        counts[event] += 1

    def on_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            counts["bytecode"] += 1
        return on_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if "profilers" not in frame.f_code.co_filename:
            return None
        frame.f_trace_opcodes = True
        return on_opcode

    with make():
        loop()  # NB: warms the caches (the lines, the ops' facts) before counting
        sys.setprofile(on_event)
        loop()
        sys.setprofile(None)
    with make():
        loop()
        sys.settrace(on_call)
        loop()
        sys.settrace(None)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    step = make_step("cpu", "small")
    loop, ops = warmed_loop(step, a.steps)
    variants: dict[str, Callable[[], AbstractContextManager[Any]]] = {
        "gpuwatch": lambda: profilers.profile(),
        "untimed (count_ops)": lambda: profilers.profile(kernel_timing=False, count_ops=True),
        "fast path": lambda: profilers.profile(kernel_timing=False),
    }
    print(f"ops/run={ops} (per op: Python calls, C calls, bytecodes run in profilers/)")
    for name, make in variants.items():
        c = _count(loop, make)
        print(
            f"{name:22} {c['call'] / ops:6.2f} {c['c_call'] / ops:6.2f} {c['bytecode'] / ops:7.1f}"
        )


if __name__ == "__main__":
    main()
