"""Shared by the demos: device choice, synthetic data, timing, small tables."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

import torch


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="auto", help="auto (cuda when there is one), cpu, cuda or cuda:N"
    )


def pick_device(choice: str = "auto") -> torch.device:
    """The device to use; falls back to the CPU with a one-line note on stderr."""
    if choice == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        print("note: no CUDA GPU found, running on the CPU", file=sys.stderr)
        return torch.device("cpu")
    device = torch.device(choice)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"note: {choice} asked for but no CUDA GPU found, running on the CPU", file=sys.stderr
        )
        return torch.device("cpu")
    return device


def synthetic_images(
    n: int, size: int, classes: int = 10, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` RGB images of ``size``x``size`` whose class is visible in their colour balance, so a
    small network can learn something; nothing is downloaded."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    base = torch.rand(n, 3, size, size, generator=g)
    tint = torch.stack([(labels % 3 == c).float() for c in range(3)], dim=1) * 0.5
    images = base * 0.5 + tint[:, :, None, None] + labels[:, None, None, None] / (2.0 * classes)
    return images.contiguous(), labels


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeat: int = 3) -> float:
    """Best wall time of ``fn`` in seconds (device work included), after one untimed warm-up
    run (the first call pays for CUDA context, kernel loading, allocator growth)."""
    synchronize(device)
    fn()
    best = float("inf")
    for _ in range(repeat):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - t)
    return best


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table, right-aligned numbers."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for k, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
