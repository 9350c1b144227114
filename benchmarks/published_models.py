"""The standard models of the published tables, written here (no torchvision): ResNet-18/34/50
(v1: stride 2 in the first 1x1 convolution of a downsampling bottleneck; v1.5: in the 3x3, as
NVIDIA's Deep Learning Examples train it) and VGG-16, each with the training step the
publication timed: forward, loss, backward, and the optimizer step where it was timed."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inp: int, width: int, stride: int, v15: bool) -> None:
        super().__init__()
        out = width * self.expansion
        s1, s3 = (1, stride) if v15 else (stride, 1)
        self.conv1 = nn.Conv2d(inp, width, 1, s1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, s3, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down: nn.Module | None = None
        if stride != 1 or inp != out:
            self.down = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False),
                                      nn.BatchNorm2d(out))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class Basic(nn.Module):
    expansion = 1

    def __init__(self, inp: int, width: int, stride: int, v15: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down: nn.Module | None = None
        if stride != 1 or inp != width:
            self.down = nn.Sequential(nn.Conv2d(inp, width, 1, stride, bias=False),
                                      nn.BatchNorm2d(width))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """He et al.'s ImageNet ResNet: a 7x7 stem, four stages, average pool, 1000 classes."""

    def __init__(self, block: type[Bottleneck | Basic], depths: list[int], v15: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )  # fmt: skip
        layers: list[nn.Module] = []
        inp = 64
        for i, n in enumerate(depths):
            width = 64 * 2**i
            for j in range(n):
                layers.append(block(inp, width, 2 if (j == 0 and i > 0) else 1, v15))
                inp = width * block.expansion
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(inp, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def vgg16() -> nn.Module:
    """Simonyan and Zisserman's configuration D: 13 3x3 convolutions, 3 linear layers."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
           512, 512, 512, "M"]  # fmt: skip
    layers: list[nn.Module] = []
    inp = 3
    for c in cfg:
        if c == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            assert isinstance(c, int)
            layers += [nn.Conv2d(inp, c, 3, padding=1), nn.ReLU()]
            inp = c
    return nn.Sequential(
        *layers, nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
        nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 1000),
    )  # fmt: skip


MODELS: dict[str, Callable[[], nn.Module]] = {
    "resnet18": lambda: ResNet(Basic, [2, 2, 2, 2], False),
    "resnet34": lambda: ResNet(Basic, [3, 4, 6, 3], False),
    "resnet50": lambda: ResNet(Bottleneck, [3, 4, 6, 3], False),
    "resnet50-v1.5": lambda: ResNet(Bottleneck, [3, 4, 6, 3], True),
    "vgg16": vgg16,
}


TRAIN, FORWARD_BACKWARD, INFER = "train", "forward+backward", "inference"
MODES = (TRAIN, FORWARD_BACKWARD, INFER)
"""What a publication timed: a training step (forward, loss, backward, SGD with momentum), the
forward and backward passes only, or inference (the model in eval mode, no gradients)."""


def model_step(
    name: str,
    batch: int,
    dtype: torch.dtype,
    mode: str,
    device: str = "meta",
    channels_last: bool = False,
) -> Callable[[], None]:
    """One step of model ``name`` on ``batch`` 224x224 images in ``dtype``, as ``mode`` says
    (``channels_last``: the model and its input in NHWC order). Meta tensors by default:
    shapes and dtypes only, no arithmetic."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    torch.manual_seed(0)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = MODELS[name]().to(device=device, dtype=dtype, memory_format=layout)
    x = torch.empty(batch, 3, 224, 224, device=device, dtype=dtype)
    x = x.contiguous(memory_format=layout)
    y = torch.zeros(batch, dtype=torch.long, device=device)
    opt = None
    if mode == TRAIN:
        # NB: foreach, as PyTorch picks on a GPU (meta tensors would get the per-tensor loop)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    if mode == INFER:
        model.eval()

        def infer() -> None:
            with torch.no_grad():
                model(x)

        return infer

    def step() -> None:
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        if opt is not None:
            opt.step()
        model.zero_grad(set_to_none=True)  # no kernel: the next backward writes them afresh

    return step
