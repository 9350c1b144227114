"""What naming the library frame of each copy and sync costs, and that it is paid only there.

    python benchmarks/library_frames.py [--syncs 2000] [--depth 30] [--rounds 7]

Under ``--fake-cuda`` (no GPU needed), a loop of ``.item()`` calls made inside a library
(a module in a site-packages folder of its own), ``--depth`` library frames below the user's
line, as a framework's ``trainer.fit()`` is: each ``.item()`` is one sync and one copy, the
library frame looked up for each. Printed:

- how many times the lookup ran against how many ops the profile saw (every op on the dispatch
  mode's path, only the counted ones on the fast path): the lookup runs once per copy or sync;
- what one lookup costs (``UserCode.note_library``: the walk from the op's frame to the user's
  line, and the count), one frame and ``--depth`` frames below the user's line, timed alone:
  the whole loop's time per sync is too noisy, on a shared machine, to show a few µs.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import profilers  # noqa: E402
from profilers.counting import user_code  # noqa: E402
from profilers.fake_cuda.harness import fake_cuda  # noqa: E402

LIBRARY = """\
import sys


def read(values, depth):
    if depth:
        return read(values, depth - 1)
    return [v.item() for v in values]


def frame(depth):
    if depth:
        return frame(depth - 1)
    return sys._getframe()
"""


def library(folder: Path) -> ModuleType:
    """A module in a site-packages folder of its own, known to the profiler as a library."""
    lib = folder / "site-packages"
    lib.mkdir()
    (lib / "busy_lib.py").write_text(LIBRARY)
    roots, places = user_code._library_roots(), user_code._library_places()
    ours, site_dirs, stdlib, torch_dir = places
    user_code._library_roots = lambda: (*roots, f"{lib}/")  # type: ignore[method-assign]
    user_code._library_places = lambda: (ours, (f"{lib}/", *site_dirs), stdlib, torch_dir)  # type: ignore[method-assign]
    spec = importlib.util.spec_from_file_location("busy_lib", lib / "busy_lib.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(work: Callable[[], None], kernel_timing: bool) -> profilers.Report:
    with profilers.profile(kernel_timing=kernel_timing) as prof:
        work()
    return prof.report()


def per_lookup_us(user: user_code.UserCode, frame: FrameType, n: int, rounds: int) -> float:
    """Median µs of one ``note_library`` (the lookup and the count) from ``frame``."""
    counts: dict[Any, Any] = {}
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            user.note_library(counts, frame, True, 4, "item", True)
        times.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, fake_cuda(1):
        busy = library(Path(tmp))
        values = torch.ones(args.syncs, device="cuda").unbind()
        extra = torch.ones(64, device="cuda")

        def work() -> None:
            y = extra
            for _ in range(args.syncs):  # ops that neither copy nor sync: never looked up
                y = y * 1.0
            busy.read(values, args.depth)

        real = user_code.UserCode.library_code
        calls = 0

        def counted(self: user_code.UserCode, frame: FrameType | None) -> Any:
            nonlocal calls
            calls += 1
            return real(self, frame)

        for timing, path in ((False, "the fast path"), (True, "the dispatch mode")):
            calls = 0
            user_code.UserCode.library_code = counted  # type: ignore[method-assign]
            r = run(work, timing)
            user_code.UserCode.library_code = real  # type: ignore[method-assign]
            print(
                f"{path}: {2 * args.syncs:,} ops ({args.syncs:,} multiplications, "
                f"{args.syncs:,} .item()), {r.totals.syncs.count:,} syncs counted, "
                f"the library frame looked up {calls:,} times"
            )

        user = user_code.UserCode()
        for depth in (0, args.depth):
            us = per_lookup_us(user, busy.frame(depth), 20_000, args.rounds)
            print(
                f"one lookup, {depth + 1} library frame(s) below the user's line: {us:.2f} us "
                f"per copy or sync (median of {args.rounds} rounds of 20,000)"
            )
        t = time.perf_counter()
        run(work, False)
        whole = (time.perf_counter() - t) / args.syncs * 1e6
        print(
            f"for scale: the loop under --fake-cuda on the fast path, {whole:.1f} us per .item() "
            "(with its multiplication)"
        )


if __name__ == "__main__":
    main()
