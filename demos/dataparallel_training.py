"""The single-GPU demo's CNN under ``nn.DataParallel`` on every visible GPU.

DataParallel copies the model to every GPU each step (broadcast), splits the batch (scatter),
gathers the outputs on the first GPU and sums the gradients back (reduce_add): profile it to see
that traffic, charged to the ``model(xb)`` and ``loss.backward()`` lines.

    gpuwatch profile demos/dataparallel_training.py --steps 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_device_arg, pick_device, synthetic_images  # noqa: E402
from single_gpu_training import FixedCNN  # noqa: E402


def split_sizes(batch: int, replicas: int) -> list[int]:
    """How nn.DataParallel's scatter splits ``batch`` over ``replicas`` (torch.chunk sizes)."""
    if replicas <= 1:
        return [batch]
    return [len(c) for c in torch.arange(batch).chunk(replicas)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    add_device_arg(ap)
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    if gpus >= 2:
        print(
            f"DataParallel over {gpus} GPUs: each batch of {args.batch} is split {split_sizes(args.batch, gpus)}"
        )
    elif gpus == 1:
        print("one GPU visible: DataParallel runs the model on it unsplit (no scatter or gather)")
    else:
        print("no GPU: DataParallel just calls the model on the CPU")
    torch.manual_seed(0)
    model = nn.DataParallel(FixedCNN().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = synthetic_images(args.steps * args.batch, args.size)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    loss_sum = torch.zeros((), device=device)
    for step in range(args.steps):
        lo = step * args.batch
        xb = images[lo : lo + args.batch].to(device, non_blocking=True)
        yb = labels[lo : lo + args.batch].to(device, non_blocking=True)
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
    print(
        f"mean loss {(loss_sum / args.steps).item():.4f} over {args.steps} steps ({device}, {max(gpus, 1)} replica(s))"
    )


if __name__ == "__main__":
    main()
