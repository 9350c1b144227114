"""Time per mini-batch (forward + backward + SGD step) for a few network shapes, on the CPU with
1, 2 and 4 threads, on each GPU, and with nn.DataParallel on 1..N GPUs: the shape of the
classic framework-comparison tables (CPU threads vs GPU, single vs multiple GPUs).

    python demos/minibatch_benchmark.py [--batch 64] [--steps 10] [--networks fc cnn resnet lstm]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table, timed  # noqa: E402


class FC(nn.Module):
    """A fully connected net: 3 hidden layers of 2048 on 28x28 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 2048),
            nn.ReLU(),
            nn.Linear(2048, 2048),
            nn.ReLU(),
            nn.Linear(2048, 2048),
            nn.ReLU(),
            nn.Linear(2048, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallAlexNet(nn.Module):
    """AlexNet's shape (5 convs, 3 dense) scaled down to 64x64 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 48, 7, stride=2, padding=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(48, 128, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(128, 192, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(192, 192, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(192, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(128 * 4 * 4, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.ReLU(),
            nn.Linear(1024, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class SmallResNet(nn.Module):
    """A ResNet with 3 stages of 2 residual blocks on 32x32 inputs."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()]
        c = 32
        for stage in range(3):
            if stage:
                layers += [
                    nn.Conv2d(c, c * 2, 3, stride=2, padding=1),
                    nn.BatchNorm2d(c * 2),
                    nn.ReLU(),
                ]
                c *= 2
            layers += [Block(c), Block(c)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=(2, 3)))


class LSTMNet(nn.Module):
    """A 2-layer LSTM of 512 over sequences of 50 steps of 128 features."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(128, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


NETWORKS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "fc": (FC, (1, 28, 28)),
    "cnn": (SmallAlexNet, (3, 64, 64)),
    "resnet": (SmallResNet, (3, 32, 32)),
    "lstm": (LSTMNet, (50, 128)),
}


def ms_per_batch(
    name: str, batch: int, steps: int, device: torch.device, replicas: int = 0
) -> float:
    make, shape = NETWORKS[name]
    torch.manual_seed(0)
    model: nn.Module = make().to(device)
    if replicas:
        model = nn.DataParallel(model, device_ids=list(range(replicas)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, *shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # warm-up
    return timed(lambda: [step() for _ in range(steps)], device, repeat=2) / steps * 1000


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--networks", nargs="+", choices=list(NETWORKS), default=list(NETWORKS))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    for t in args.threads:
        if t > cores:
            print(
                f"warning: {t} threads asked for on {cores} cores: the 'CPU {t} thr' column "
                "measures oversubscription, not more parallelism",
                file=sys.stderr,
            )
    gpus = torch.cuda.device_count()
    headers = ["network"] + [f"CPU {t} thr" for t in args.threads]
    headers += [f"GPU {i}" for i in range(gpus)] + [f"DP x{k}" for k in range(1, gpus + 1)]
    saved = torch.get_num_threads()
    rows = []
    for name in args.networks:
        row: list[object] = [name]
        for t in args.threads:
            torch.set_num_threads(t)
            row.append(f"{ms_per_batch(name, args.batch, args.steps, torch.device('cpu')):.1f}")
        torch.set_num_threads(saved)
        for i in range(gpus):
            row.append(
                f"{ms_per_batch(name, args.batch, args.steps, torch.device(f'cuda:{i}')):.2f}"
            )
        for k in range(1, gpus + 1):
            row.append(
                f"{ms_per_batch(name, args.batch, args.steps, torch.device('cuda:0'), replicas=k):.2f}"
            )
        rows.append(row)
    print(
        f"ms per mini-batch of {args.batch} (forward, backward, SGD step); best of 2 runs of {args.steps} steps"
    )
    if not gpus:
        print("no GPU: only the CPU columns are measured")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
