"""What gpuwatch counts, without a GPU: an evaluation loop's data movement on fake CUDA tensors.

PyTorch's FakeTensorMode makes tensors that say ``cuda:0`` but hold no data, so every copy and
every host wait the loop would make on a GPU still goes through the dispatcher, where gpuwatch
counts it. No numbers are computed (losses are symbols), times are the host's, and there is no
backward pass (autograd needs a real CUDA build). On a GPU, profile
``demos/single_gpu_training.py`` instead.

    gpuwatch profile demos/fake_gpu_walkthrough.py --steps 50

The classic mistakes are on lines with a MISTAKE comment; the summary points at them.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args(argv)
    with FakeTensorMode(shape_env=ShapeEnv()):
        w1, b1 = (torch.randn(784, 512) * 0.03).to("cuda:0"), torch.zeros(512).to("cuda:0")
        w2, b2 = (torch.randn(512, 10) * 0.04).to("cuda:0"), torch.zeros(10).to("cuda:0")
        images = torch.randn(args.steps * args.batch, 784)  # the data set, in pageable host memory
        labels = torch.randint(0, 10, (args.steps * args.batch,))
        losses = []
        for step in range(args.steps):
            lo = step * args.batch
            xb = images[lo : lo + args.batch].to("cuda:0", non_blocking=True)  # MISTAKE: non_blocking from pageable memory
            yb = labels[lo : lo + args.batch].to("cuda:0")  # MISTAKE: a blocking copy every step
            scale = torch.tensor(1 / 255).to("cuda:0")  # MISTAKE: a constant made on the CPU and moved every step
            logits = F.relu((xb * scale) @ w1 + b1) @ w2 + b2
            loss = F.cross_entropy(logits, yb)
            losses.append(loss.item())  # MISTAKE: .item() every step waits for the GPU
            accuracy = (logits.argmax(1) == yb).float().mean().cpu()  # MISTAKE: a metric copied to the host every step
        del accuracy
    print(f"{args.steps} steps of {args.batch} on fake cuda:0 tensors: {len(losses)} losses logged")


if __name__ == "__main__":
    main()
