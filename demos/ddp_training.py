"""The single-GPU demo's CNN under DistributedDataParallel: one process per GPU, as people train
today, next to ``dataparallel_training.py``.

Each rank keeps its own copy of the model and reads its own share of the data; the only traffic
between GPUs is the gradients' all-reduce, from DDP's bucket hooks during ``loss.backward()``
(and one broadcast of the model at ``DistributedDataParallel(...)``). Profile it to see that per
line and per rank; on a machine with no GPU it runs on the CPU with the gloo backend:

    gpuwatch profile --nproc-per-node 2 demos/ddp_training.py --steps 20
    torchrun --nproc-per-node 2 -m gpuwatch profile --json r.json demos/ddp_training.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import synthetic_images  # noqa: E402
from single_gpu_training import FixedCNN  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64, help="per rank (default 64)")
    ap.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:
        sys.exit("run it with a launcher: torchrun --nproc-per-node N demos/ddp_training.py")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)  # the same initial model on every rank (DDP broadcasts rank 0's anyway)
    model = nn.parallel.DistributedDataParallel(
        FixedCNN().to(device), device_ids=[device.index] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = synthetic_images(args.steps * args.batch * world, args.size)
    # This rank's share: every world-th batch (what a DistributedSampler hands out).
    images, labels = images[rank::world].contiguous(), labels[rank::world].contiguous()
    if cuda:
        images, labels = images.pin_memory(), labels.pin_memory()
    loss_sum = torch.zeros((), device=device)
    for step in range(args.steps):
        lo = step * args.batch
        xb = images[lo : lo + args.batch].to(device, non_blocking=True)
        yb = labels[lo : lo + args.batch].to(device, non_blocking=True)
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here, bucket by bucket
        optimizer.step()
        loss_sum += loss.detach()
    mean = loss_sum / args.steps
    dist.all_reduce(mean)  # the mean over ranks, once at the end
    if rank == 0:
        print(
            f"mean loss {(mean / world).item():.4f} over {args.steps} steps x {world} ranks "
            f"({device.type}, {'nccl' if cuda else 'gloo'})"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
