"""A small CNN trained on synthetic images, written twice: the classic device mistakes, and
their fixes. Profile both and compare:

    gpuwatch profile demos/single_gpu_training.py --variant naive
    gpuwatch profile demos/single_gpu_training.py --variant fixed

Every mistake in the naive variant is on its own line, with a MISTAKE comment that the
profile's source column shows; the fixed variant marks each fix with a FIX comment. Both print
the same final loss.
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

MEAN = (0.55, 0.55, 0.55)


class NaiveCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(MEAN).view(1, 3, 1, 1).to(x.device)  # MISTAKE: CPU tensor made mid-forward, moved every step
        x = F.max_pool2d(F.relu(self.conv1(x - mean)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.mean(dim=(2, 3)))


class FixedCNN(NaiveCNN):
    def __init__(self, classes: int = 10) -> None:
        super().__init__(classes)
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1))  # FIX: a buffer moves with the model, once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x - self.mean)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.mean(dim=(2, 3)))


def train_naive(
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    steps: int,
    batch: int,
    epochs: int,
) -> float:
    torch.manual_seed(0)
    model = NaiveCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # MISTAKE: optimiser built before .to(device)
    epoch_loss = 0.0
    for epoch in range(epochs):
        losses, accuracy = [], 0.0
        for step in range(steps):
            model.to(device)  # MISTAKE: moving the model inside the loop (a no-op after the first step, but a habit that costs)
            lo = (step * batch) % len(images)
            xb = images[lo : lo + batch].to(device, non_blocking=True)  # MISTAKE: non_blocking=True from pageable memory does nothing
            yb = labels[lo : lo + batch].to(device)  # MISTAKE: a blocking copy each step
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())  # MISTAKE: loss.item() every step waits for the GPU
            accuracy += (out.argmax(1).cpu().numpy() == yb.cpu().numpy()).mean()  # MISTAKE: .cpu().numpy() metrics every step
        epoch_loss = sum(losses) / len(losses)
        print(f"epoch {epoch}: loss {epoch_loss:.4f} accuracy {accuracy / steps:.3f}")
    return epoch_loss


def train_fixed(
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    steps: int,
    batch: int,
    epochs: int,
) -> float:
    torch.manual_seed(0)
    model = FixedCNN().to(device)  # FIX: model on the device once, before the optimiser
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()  # FIX: pinned memory, so non_blocking copies are async
    epoch_loss = 0.0
    for epoch in range(epochs):
        loss_sum = torch.zeros((), device=device)  # FIX: accumulate on the device
        correct = torch.zeros((), device=device, dtype=torch.long)
        for step in range(steps):
            lo = (step * batch) % len(images)
            xb = images[lo : lo + batch].to(device, non_blocking=True)  # FIX: async copy from pinned memory
            yb = labels[lo : lo + batch].to(device, non_blocking=True)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()  # FIX: no sync; the value stays on the GPU
            correct += (out.argmax(1) == yb).sum()
        epoch_loss = (loss_sum / steps).item()  # FIX: one fetch per epoch
        accuracy = correct.item() / (steps * batch)
        print(f"epoch {epoch}: loss {epoch_loss:.4f} accuracy {accuracy:.3f}")
    return epoch_loss


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--variant", choices=("naive", "fixed"), default="naive")
    ap.add_argument("--steps", type=int, default=50, help="steps per epoch (default 50)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    add_device_arg(ap)
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    images, labels = synthetic_images(args.steps * args.batch, args.size)
    train = train_naive if args.variant == "naive" else train_fixed
    loss = train(images, labels, device, args.steps, args.batch, args.epochs)
    print(f"final loss {loss:.4f} ({args.variant}, {device})")


if __name__ == "__main__":
    main()
