"""The workloads ``gpu_model_accuracy.py`` measures: the single-GPU demo (naive and
fixed), a small ResNet-ish convolutional net on 64x64 images, a small transformer encoder (4
layers, sequence 256, width 512) in bfloat16 and float32, and the stand-in's fixed ops (run on
fake ``cuda:0`` tensors on a machine without a GPU).

A workload is built for a device, then ``run(steps, step_done)`` trains ``steps`` steps and
calls ``step_done()`` after each optimizer step.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

DEMOS = Path(__file__).resolve().parent.parent / "demos"

Run = Callable[[int, Callable[[], None]], None]


def _demo_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gpuwatch_demo_single_gpu", DEMOS / "single_gpu_training.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo(variant: str, device: torch.device, batch: int = 64, size: int = 32) -> Run:
    """demos/single_gpu_training.py's own loop (its default batch and image size), one epoch of
    ``steps`` steps, its prints swallowed; steps are its optimizer's."""
    module = _demo_module()
    train = module.train_naive if variant == "naive" else module.train_fixed

    def run(steps: int, step_done: Callable[[], None]) -> None:
        images, labels = module.synthetic_images(steps * batch, size)
        hook = register_optimizer_step_post_hook(lambda *_: step_done())
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                train(images, labels, device, steps, batch, 1)
        finally:
            hook.remove()

    return run


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    """A stem and three residual blocks (32, 64, 128 channels; 64 -> 16 pixels), pooled, a
    linear head: the conv/bn/relu mix of an image model, small enough for seconds."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32))
        self.blocks = nn.Sequential(_Block(32, 32, 1), _Block(32, 64, 2), _Block(64, 128, 2))
        self.head = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.stem(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def cnn(device: torch.device, batch: int = 64, size: int = 64) -> Run:
    """:class:`SmallResNet` on ``batch`` images of ``size``x``size`` already on the device,
    SGD with momentum."""
    torch.manual_seed(0)
    model = SmallResNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def run(steps: int, step_done: Callable[[], None]) -> None:
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step_done()

    return run


def transformer(
    device: torch.device,
    dtype: torch.dtype,
    layers: int = 4,
    seq: int = 256,
    width: int = 512,
    batch: int = 8,
    vocab: int = 1024,
) -> Run:
    """A ``layers``-layer encoder (8 heads, feed-forward 4 x ``width``, dropout 0.1) over
    ``batch`` sequences of ``seq`` tokens, a linear head over ``vocab`` classes, AdamW; weights
    and activations in ``dtype`` (the loss in float32)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 8, 4 * width, 0.1, batch_first=True)
    encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    model = nn.Sequential(encoder, nn.Linear(width, vocab)).to(device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, width, device=device, dtype=dtype)
    y = torch.randint(0, vocab, (batch * seq,), device=device)

    def run(steps: int, step_done: Callable[[], None]) -> None:
        for _ in range(steps):
            loss = F.cross_entropy(model(x).flatten(0, 1).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step_done()

    return run


def stand_in(device: torch.device) -> Run:
    """Fixed ops, one of each class, called by their aten names (no decomposition that a torch
    version could change): for the stand-in run on fake ``cuda:0`` tensors."""
    aten = torch.ops.aten

    def run(steps: int, step_done: Callable[[], None]) -> None:
        # fake tensors: no memory, no arithmetic, whatever their size
        host = torch.ones(1024, 1024)
        w = torch.ones(1024, 1024, device=device)
        img = torch.ones(32, 64, 64, 64, device=device)
        k = torch.ones(64, 64, 3, 3, device=device)
        q = torch.ones(8, 16, 1024, 64, device=device, dtype=torch.bfloat16)
        for _ in range(steps):
            x = host.to(device)  # copy h2d: 4 MiB from pageable memory
            y = aten.relu(aten.mm(x, w))  # matmul, then elementwise
            aten.convolution(img, k, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
            aten.native_layer_norm(y, [1024], None, None, 1e-5)
            aten._scaled_dot_product_efficient_attention(q, q, q, None, False)
            aten.sum(y)  # reduction
            aten.cat([y, y])  # other
            y.to("cpu")  # copy d2h: 4 MiB into pageable memory
            step_done()

    return run


WORKLOADS: dict[str, Callable[[torch.device], Run]] = {
    "demo-naive": lambda d: demo("naive", d),
    "demo-fixed": lambda d: demo("fixed", d),
    "cnn": cnn,
    "transformer-bf16": lambda d: transformer(d, torch.bfloat16),
    "transformer-fp32": lambda d: transformer(d, torch.float32),
}
"""The real GPU's workloads, by the name the tables give them."""
