"""The textbook GPU exercises, each printing a small table of its timings.

    python demos/exercises.py matmul      # CPU vs GPU matrix product speed at a few sizes
    python demos/exercises.py trace-log   # log tr(M M^T) one .item() at a time vs once at the end
    python demos/exercises.py two-gpus    # two products on two GPUs at once vs one after another

Profile them to see why the numbers differ: ``gpuwatch profile demos/exercises.py trace-log``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_device_arg, pick_device, synchronize, table, timed  # noqa: E402


def matmul(args: argparse.Namespace, device: torch.device) -> None:
    rows = []
    for n in args.sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        cpu_s = timed(lambda a=a, b=b: a @ b, torch.device("cpu"))
        if device.type == "cuda":
            ga, gb = a.to(device), b.to(device)
            gpu_s = timed(lambda ga=ga, gb=gb: ga @ gb, device)
            rows.append(
                [f"{n}x{n}", f"{cpu_s * 1e3:.3f}", f"{gpu_s * 1e3:.3f}", f"{cpu_s / gpu_s:.1f}x"]
            )
        else:
            rows.append([f"{n}x{n}", f"{cpu_s * 1e3:.3f}", "-", "-"])
    if device.type != "cuda":
        print("no GPU: only the CPU column is measured")
    print(table(["size", "CPU ms", "GPU ms", "GPU speed-up"], rows))


def trace_log(args: argparse.Namespace, device: torch.device) -> None:
    g = torch.Generator().manual_seed(0)
    mats = torch.randn(args.steps, args.size, args.size, generator=g).to(device)

    def one_at_a_time() -> list[float]:
        log = []
        for m in mats:
            log.append((m @ m.T).trace().item())  # a sync per product
        return log

    def on_device() -> list[float]:
        log = torch.empty(len(mats), device=device)
        for i, m in enumerate(mats):
            log[i] = (m @ m.T).trace()  # stays on the device
        return log.tolist()  # one copy at the end

    slow = timed(one_at_a_time, device)
    fast = timed(on_device, device)
    same = torch.allclose(torch.tensor(one_at_a_time()), torch.tensor(on_device()), rtol=1e-4)
    print(
        table(
            ["how", f"ms for {args.steps} products of {args.size}x{args.size}", "syncs"],
            [
                ["log each tr(M M^T) with .item()", f"{slow * 1e3:.2f}", args.steps],
                ["keep the log on the device, copy once", f"{fast * 1e3:.2f}", 1],
            ],
        )
    )
    print(f"same values: {same}")


def two_gpus(args: argparse.Namespace, device: torch.device) -> None:
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if count < 2:
        print(f"skipped: needs two GPUs, found {count}")
        return
    n = args.size
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")
    a0, b0 = torch.randn(n, n, device=d0), torch.randn(n, n, device=d0)
    a1, b1 = a0.to(d1), b0.to(d1)

    def sequential() -> None:
        for _ in range(args.steps):
            a0 @ b0
            a0 @ b0

    def parallel() -> None:
        for _ in range(args.steps):
            a0 @ b0  # launches are asynchronous: both GPUs work at once
            a1 @ b1

    def both() -> None:
        synchronize(d0)
        synchronize(d1)

    seq = timed(lambda: (sequential(), both()), d0)
    par = timed(lambda: (parallel(), both()), d0)
    print(
        table(
            ["how", f"ms for {args.steps} x 2 products of {n}x{n}"],
            [
                ["one GPU, one after another", f"{seq * 1e3:.2f}"],
                ["two GPUs at once", f"{par * 1e3:.2f}"],
                ["speed-up", f"{seq / par:.2f}x"],
            ],
        )
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="exercise", required=True)
    m = sub.add_parser("matmul", help="CPU vs GPU matrix product speed")
    m.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 2048])
    t = sub.add_parser("trace-log", help="log tr(M M^T) one result at a time vs once")
    t.add_argument("--steps", type=int, default=1000)
    t.add_argument("--size", type=int, default=100)
    two = sub.add_parser("two-gpus", help="two products on two GPUs at once vs one after another")
    two.add_argument("--steps", type=int, default=20)
    two.add_argument("--size", type=int, default=4096)
    for p in (m, t, two):
        add_device_arg(p)
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    {"matmul": matmul, "trace-log": trace_log, "two-gpus": two_gpus}[args.exercise](args, device)


if __name__ == "__main__":
    main()
