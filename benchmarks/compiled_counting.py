"""What counting costs a torch.compile'd training step, against what it costs the same step run
eager, side by side in one process (issue 43: "the compiled path no slower than the eager path's
counting").

    python benchmarks/compiled_counting.py [--steps 30] [--rounds 9] [--backend inductor]
        [--device cpu|cuda] [--width 64]

The workload is profiler_overhead.py's small MLP training step (many small ops: where a per-op
cost shows most), once eager and once with the model ``torch.compile``d (the optimizer step stays
eager, as most scripts have it). Each round runs every variant once, in turn, so drift hits all
alike; the median round counts. Before the rounds each variant runs once untimed (compiling, the
fast path's first registration, dynamo's recompiles if entering a profile caused any: they
would show here, as a warm-up that never ends).

Variants, for each of eager and compiled: plain; gpuwatch's fast path
(``kernel_timing=False``: no dispatch mode, dynamo compiles under it); gpuwatch counting every
op (``kernel_timing=False, count_ops=True``: the dispatch mode, under which dynamo compiles
nothing and the compiled model runs eager); gpuwatch's default (``profilers.profile()``: kernel
timing, the dispatch mode too); and, for comparison, counting every op as before the profile set
torch's ``force_eager`` stance (dynamo handed each frame of every call, and skipping it).
Counting cost = variant - its own plain, per step.

The verdicts: the compiled path's counting cost against the eager path's on the fast path, and
the compiled model's time under the dispatch mode against the eager model's under it (the same
eager code, plus what calling a compiled function costs when it runs eager). On the CPU each round is
timed in the process's CPU time (its threads' together, the profiler's own included), not the
wall clock, which on a shared machine also holds the time other processes had the cores (wall
medians moved by 2x from run to run here). The verdicts are read from each variant's fastest
round; the table gives the median too.
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
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import profilers  # noqa: E402


@contextlib.contextmanager
def without_the_stance() -> Iterator[None]:
    """Counting every op as before the profile set torch's force_eager stance: dynamo is
    handed each frame of every call of the compiled model and skips it (for comparison)."""
    from profilers import session

    keep = session.run_eager  # type: ignore[attr-defined]
    setattr(session, "run_eager", lambda stack, mark: None)  # noqa: B010
    try:
        with profilers.profile(kernel_timing=False, count_ops=True):
            yield
    finally:
        setattr(session, "run_eager", keep)  # noqa: B010


PATHS: dict[str, Callable[[], Any]] = {
    "plain": contextlib.nullcontext,
    "fast path (kernel_timing=False)": lambda: profilers.profile(kernel_timing=False),
    "every op (count_ops=True)": lambda: profilers.profile(kernel_timing=False, count_ops=True),
    "default (kernel timing)": profilers.profile,
    "every op, no stance (before)": without_the_stance,
}


def make_step(device: str, width: int, compiled: bool, backend: str) -> Callable[[], torch.Tensor]:
    """One training step of a 4-layer MLP, batch 32; the model compiled when ``compiled``."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    forward: Callable[[torch.Tensor], torch.Tensor] = model
    if compiled:
        forward = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, width, device=device)
    y = torch.randint(0, 10, (32,), device=device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def clock(device: str) -> Callable[[], float]:
    """The process's CPU time on the CPU (every thread of it: the profiler's own threads
    included), wall time on a GPU. NB: on a shared machine the wall clock of a round also
    holds the time other processes had the cores: here it moved medians by 2x run to run."""
    return time.process_time if device == "cpu" else time.perf_counter


def timed(make: Callable[[], Any], step: Callable[[], Any], steps: int, device: str) -> float:
    """Seconds for ``steps`` steps inside the context (entering and leaving it not counted)."""
    gc.collect()  # every variant from a collected heap (see profiler_overhead.timed)
    now = clock(device)
    with make():
        if device == "cuda":
            torch.cuda.synchronize()
        t = now()
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
        return now() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)
    steps = {
        kind: make_step(args.device, args.width, kind == "compiled", args.backend)
        for kind in ("eager", "compiled")
    }
    variants = [(kind, path) for kind in steps for path in PATHS]
    from torch._dynamo.utils import counters

    for kind, path in variants:  # warm-up: compiles, first registrations, any recompile
        graphs = int(counters["stats"]["unique_graphs"])
        timed(PATHS[path], steps[kind], 3, args.device)
        made = int(counters["stats"]["unique_graphs"]) - graphs
        if made:
            print(f"warm-up: {kind}, {path}: dynamo compiled {made} graph(s)")
    graphs_warm = int(counters["stats"]["unique_graphs"])
    samples: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for kind, path in variants:
            samples[(kind, path)].append(
                timed(PATHS[path], steps[kind], args.steps, args.device) / args.steps
            )
    median = {v: statistics.median(s) * 1e3 for v, s in samples.items()}
    ms = {v: min(s) * 1e3 for v, s in samples.items()}  # NB: the verdicts' basis (module doc)
    recompiled = int(counters["stats"]["unique_graphs"]) - graphs_warm
    print(
        f"\nMLP width {args.width}, batch 32, {args.device}, backend {args.backend}: "
        f"{args.steps} steps x {args.rounds} rounds; graphs compiled in the rounds: {recompiled}"
    )
    print(
        "| model | counting | ms per step, median | fastest round | vs its plain "
        "(fastest) | counting cost per step (fastest) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, path in variants:
        plain = ms[(kind, "plain")]
        paid = "-" if path == "plain" else f"{ms[(kind, path)] - plain:.3f} ms"
        print(
            f"| {kind} | {path} | {median[(kind, path)]:.3f} | {ms[(kind, path)]:.3f} | "
            f"{ms[(kind, path)] / plain:.2f}x | {paid} |"
        )
    fast = "fast path (kernel_timing=False)"
    cost = {k: ms[(k, fast)] - ms[(k, "plain")] for k in steps}
    print(
        f"\nfastest rounds; fast path: compiled's counting cost / eager's = "
        f"{cost['compiled']:.3f} / {cost['eager']:.3f} ms per step = "
        f"{cost['compiled'] / cost['eager']:.2f}"
    )
    for path in (
        "every op (count_ops=True)",
        "default (kernel timing)",
        "every op, no stance (before)",
    ):
        print(
            f"{path}: compiled model / eager model = {ms[('compiled', path)]:.3f} / "
            f"{ms[('eager', path)]:.3f} ms per step = "
            f"{ms[('compiled', path)] / ms[('eager', path)]:.2f}"
        )

    forward_calls(args.device, args.width, args.backend, args.rounds)


def forward_calls(device: str, width: int, backend: str, rounds: int, calls: int = 100) -> None:
    """The per-call part alone: the model's forward, no grad, under the dispatch mode, eager
    model against the compiled one with and without the stance (what a call of a compiled
    module costs when its code runs eager)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(32, width, device=device)
    every_op = PATHS["every op (count_ops=True)"]
    variants = {
        "eager model": (model, every_op),
        "compiled model, force_eager stance": (compiled, every_op),
        "compiled model, no stance (before)": (compiled, without_the_stance),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        compiled(x)
        for _ in range(2):  # warm-up
            for m, make in variants.values():
                with make():
                    m(x)
        for _ in range(rounds):
            for name, (m, make) in variants.items():
                gc.collect()
                now = clock(device)
                with make():
                    t = now()
                    for _ in range(calls):
                        m(x)
                    samples[name].append((now() - t) / calls * 1e6)
    print(f"\nforward only, no grad, counting every op: {calls} calls x {rounds} rounds")
    print("| model | µs per call, median | fastest round | vs the eager model (fastest) |")
    print("| --- | --- | --- | --- |")
    eager = min(samples["eager model"])
    for name, got in samples.items():
        print(
            f"| {name} | {statistics.median(got):.1f} | {min(got):.1f} | {min(got) / eager:.2f}x |"
        )


if __name__ == "__main__":
    main()
