"""What gpuwatch counts without a GPU: a training loop written for CUDA, run on a laptop.

Plain CUDA code (``device = "cuda" if torch.cuda.is_available() else "cpu"``): under
``gpuwatch profile --fake-cuda`` it runs against a simulated GPU, and every copy and host wait it
would make on a real one is counted, per line. The values are computed on the CPU (the losses it
prints are real), and no kernel time is measured. On a GPU, drop ``--fake-cuda``.

    gpuwatch profile --fake-cuda demos/fake_gpu_walkthrough.py --steps 50
    gpuwatch profile --fake-cuda --gpu H100 --what-if demos/fake_gpu_walkthrough.py --steps 50

Each step ends at ``opt.step()``: the second command replays the steps on a model of an H100
(PREDICTED, with its range) and says what each fix would save.

The classic mistakes are on lines with a MISTAKE comment; the summary points at them.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w1, b1 = (torch.randn(784, 512) * 0.03).to(device), torch.zeros(512).to(device)
    w2, b2 = (torch.randn(512, 10) * 0.04).to(device), torch.zeros(10).to(device)
    params = [w1.requires_grad_(), b1.requires_grad_(), w2.requires_grad_(), b2.requires_grad_()]
    opt = torch.optim.SGD(params, lr=0.1)
    images = torch.randn(args.steps * args.batch, 784)  # the data set, in pageable host memory
    labels = torch.randint(0, 10, (args.steps * args.batch,))
    losses = []
    for step in range(args.steps):
        lo = step * args.batch
        xb = images[lo : lo + args.batch].to(device, non_blocking=True)  # MISTAKE: non_blocking from pageable memory
        yb = labels[lo : lo + args.batch].to(device)  # MISTAKE: a blocking copy every step
        scale = torch.tensor(1 / 255).to(device)  # MISTAKE: a constant made on the CPU and moved every step
        logits = F.relu((xb * scale) @ w1 + b1) @ w2 + b2
        loss = F.cross_entropy(logits, yb)
        losses.append(loss.item())  # MISTAKE: .item() every step waits for the GPU
        accuracy = (logits.argmax(1) == yb).float().mean().cpu()  # MISTAKE: a metric copied to the host every step
        loss.backward()
        opt.step()  # a step ends here: what the time view and --gpu NAME replay
        opt.zero_grad(set_to_none=True)
    del accuracy
    print(f"{args.steps} steps of {args.batch} on {device}: {len(losses)} losses logged, last {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
