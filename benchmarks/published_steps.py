"""The GPU model against published step times of standard models, per GPU (issue 44).

    python benchmarks/published_steps.py [--markdown OUT.md] [--json OUT.json] [--check]

Each row of :data:`PUBLISHED` is a figure someone else measured on a real GPU (the source and
its address beside it): a model, a batch, a type, what was timed, and the time per step (a
range where the publication gives several: Shi et al. timed five frameworks). The model
predicts the same step exactly as ``--fake-cuda --gpu NAME`` does: each op's time from
:func:`~profilers.timing.gpu_model.roofline.op_cost` and
:func:`~profilers.timing.gpu_model.roofline.kernel_ns` (meta tensors: shapes and types only),
queued by the host at :data:`~profilers.timing.gpu_model.rates.HOST_LAUNCH_NS` an op and
replayed (:func:`~profilers.timing.replay.replay`). Nothing here is fitted to the figures.

Per row: the predicted step, and ``published / predicted`` at both ends of the published range
(the factor the prediction is off by). Per GPU: those factors' span over its rows, and whether
every prediction falls within 0.8x-1.2x of its published range: a GPU where one does not is
*unvalidated*, and ``--gpu`` says so with the measured error
(:mod:`profilers.timing.gpu_model.validation` holds the table; ``--check`` fails when it
differs from what this script computes, and ``tests/test_published_steps.py`` runs it).

A multi-die board is one row per die: a K80 is two GK210 GPUs, and a single-process job runs
on one of them (the spec is per die: :mod:`profilers.timing.gpu_model.specs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks.published_models import FORWARD_BACKWARD, INFER, TRAIN, model_step  # noqa: E402
from profilers.timing.gpu_model import validation  # noqa: E402
from profilers.timing.gpu_model.rates import HOST_LAUNCH_NS  # noqa: E402
from profilers.timing.gpu_model.roofline import kernel_ns, op_cost  # noqa: E402
from profilers.timing.gpu_model.specs import gpu_spec  # noqa: E402
from profilers.timing.replay import KERNEL, ReplayOp, replay  # noqa: E402

LOW, HIGH = validation.WITHIN
"""A prediction is good when it lies within LOW x the published range's low end and HIGH x its
high end."""

SHI = (
    'Shi, Wang, Xu, Chu, "Benchmarking State-of-the-Art Deep Learning Software Tools" '
    "(arXiv:1608.07249), time per mini-batch, ResNet-50, batch 16: the range over Caffe, CNTK, "
    "MXNet, TensorFlow and Torch",
    "https://arxiv.org/abs/1608.07249",
)
JOHNSON = (
    "J. Johnson, cnn-benchmarks (Torch7, cuDNN 5.0.05), forward + backward, batch 16, 224x224",
    "https://github.com/jcjohnson/cnn-benchmarks",
)
DLE = (
    "NVIDIA Deep Learning Examples, ResNet50 v1.5 for PyTorch (pytorch-21.03 NGC container), "
    "1 GPU; batch sizes from its configs.yml",
    "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/"
    "ConvNets/resnet50v1.5",
)


@dataclass(frozen=True)
class Published:
    """One published figure: ``gpu`` (our spec's name), ``model``, ``batch``, ``dtype``
    (``float32``; ``float16`` for mixed precision; ``tf32``: float32 on tensor cores),
    ``mode`` (what was timed), the step's time in seconds (``low_s``-``high_s``), the
    ``source`` and its ``url``; ``channels_last``: the run laid activations out NHWC."""

    gpu: str
    model: str
    batch: int
    dtype: str
    mode: str
    low_s: float
    high_s: float
    source: tuple[str, str]
    channels_last: bool = False

    @property
    def label(self) -> str:
        return f"{self.model} b{self.batch} {self.dtype} {self.mode}"


def _img_s(images_per_s: float, batch: int) -> float:
    """A throughput (images/s) as a step's seconds."""
    return batch / images_per_s


PUBLISHED: tuple[Published, ...] = (
    # Shi et al.: Caffe's ResNet-50 (stride 2 in the first 1x1 convolution: v1), SGD
    Published("GTX-1080", "resnet50", 16, "float32", TRAIN, 0.136, 0.227, SHI),
    Published("GTX-980", "resnet50", 16, "float32", TRAIN, 0.207, 0.327, SHI),
    Published("K80", "resnet50", 16, "float32", TRAIN, 0.449, 0.702, SHI),
    # Johnson: fb.resnet.torch's ResNets (stride in the 3x3: v1.5), forward + backward only
    Published("GTX-1080", "resnet18", 16, "float32", FORWARD_BACKWARD, 0.04707, 0.04707, JOHNSON),
    Published("GTX-1080", "resnet34", 16, "float32", FORWARD_BACKWARD, 0.07970, 0.07970, JOHNSON),
    Published("GTX-1080", "resnet50-v1.5", 16, "float32", FORWARD_BACKWARD, 0.15390, 0.15390,
              JOHNSON),
    Published("GTX-1080", "vgg16", 16, "float32", FORWARD_BACKWARD, 0.23255, 0.23255, JOHNSON),
    # NVIDIA: training throughput, 1 GPU (DGX A100 80GB, DGX-1 16GB); inference, batch 256;
    # mixed precision runs channels-last (configs.yml: memory_format nhwc), the rest NCHW
    Published("A100-80GB", "resnet50-v1.5", 256, "tf32", TRAIN, _img_s(938, 256),
              _img_s(938, 256), DLE),
    Published("A100-80GB", "resnet50-v1.5", 256, "float16", TRAIN, _img_s(2470, 256),
              _img_s(2470, 256), DLE, channels_last=True),
    Published("V100", "resnet50-v1.5", 112, "float32", TRAIN, _img_s(367, 112),
              _img_s(367, 112), DLE),
    Published("V100", "resnet50-v1.5", 256, "float16", TRAIN, _img_s(1200, 256),
              _img_s(1200, 256), DLE, channels_last=True),
    Published("V100", "resnet50-v1.5", 256, "float32", INFER, 0.21448, 0.21448, DLE),
    Published("V100", "resnet50-v1.5", 256, "float16", INFER, 0.08414, 0.08414, DLE,
              channels_last=True),
    Published("T4", "resnet50-v1.5", 256, "float32", INFER, 0.63598, 0.63598, DLE),
    Published("T4", "resnet50-v1.5", 256, "float16", INFER, 0.22595, 0.22595, DLE,
              channels_last=True),
)  # fmt: skip


class _Predict(TorchDispatchMode):
    """Each op that runs a kernel, as the ``--fake-cuda --gpu`` replay queues it: the host's
    launch, then the model's time on the GPU."""

    def __init__(self, gpu: str, tf32: bool) -> None:
        super().__init__()
        self.spec = gpu_spec(gpu)
        self.tf32 = tf32
        self.ops: list[ReplayOp] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        cost = op_cost(func, args, kwargs, out, allow_tf32=self.tf32)
        ns = kernel_ns(self.spec, cost)
        if ns:
            self.ops.append(ReplayOp(KERNEL, "step", host_ns=HOST_LAUNCH_NS, gpu_ns=ns))
        return out


def predict_s(row: Published) -> float:
    """The model's step for ``row``, in seconds (in training, the second step: the first
    makes the optimizer's state)."""
    dtype = torch.float16 if row.dtype == "float16" else torch.float32
    step = model_step(row.model, row.batch, dtype, row.mode, channels_last=row.channels_last)
    if row.mode == TRAIN:
        step()  # NB: the optimizer's state (momentum buffers) is made by the first step
    mode = _Predict(row.gpu, tf32=row.dtype == "tf32")
    with mode:
        step()
    return replay(mode.ops).step_ns / 1e9


def compare(rows: Iterable[Published] | None = None) -> list[dict[str, Any]]:
    """Each row (all of :data:`PUBLISHED` by default) predicted: the published range, the
    prediction, the factors ``published / predicted`` at the range's ends, and whether it is
    within LOW-HIGH."""
    out = []
    for r in PUBLISHED if rows is None else rows:
        p = predict_s(r)
        out.append({
            "gpu": r.gpu, "model": r.model, "batch": r.batch, "dtype": r.dtype, "mode": r.mode,
            "channels_last": r.channels_last,
            "published_s": [r.low_s, r.high_s], "predicted_s": round(p, 5),
            "factor": [round(r.low_s / p, 2), round(r.high_s / p, 2)],
            "within": LOW * r.low_s <= p <= HIGH * r.high_s,
            "source": r.source[0], "url": r.source[1],
        })  # fmt: skip
    return out


def per_gpu(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per GPU: the span of ``published / predicted`` over its rows, how many rows, whether
    every one is within LOW-HIGH of its range (``validated``)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = out.setdefault(r["gpu"], {"low": r["factor"][0], "high": r["factor"][1],
                                      "rows": 0, "validated": True})  # fmt: skip
        g["low"] = min(g["low"], r["factor"][0])
        g["high"] = max(g["high"], r["factor"][1])
        g["rows"] += 1
        g["validated"] = g["validated"] and r["within"]
    return out


def as_table(rows: list[dict[str, Any]]) -> dict[str, validation.Checked]:
    """The per-GPU figures as :mod:`~profilers.timing.gpu_model.validation` holds them."""
    return {
        name: validation.Checked(g["low"], g["high"], g["rows"], g["validated"])
        for name, g in per_gpu(rows).items()
    }


def _ms(s: float) -> str:
    return f"{1000 * s:,.1f}"


def render_markdown(rows: list[dict[str, Any]]) -> str:
    """The README's tables: every row, then per GPU."""
    lines = [
        "| GPU | model, batch, type, timed | published ms | predicted ms | published / "
        "predicted | within 0.8-1.2x | source |",
        "| --- | --- | ---: | ---: | ---: | :---: | --- |",
    ]
    for r in rows:
        lo, hi = r["published_s"]
        pub = _ms(lo) if lo == hi else f"{_ms(lo)}-{_ms(hi)}"
        f = r["factor"]
        factor = f"{f[0]:.2f}" if f[0] == f[1] else f"{f[0]:.2f}-{f[1]:.2f}"
        lines.append(
            f"| {r['gpu']} | {r['model']} b{r['batch']} {r['dtype']}"
            f"{' NHWC' if r['channels_last'] else ''} {r['mode']} | {pub} | "
            f"{_ms(r['predicted_s'])} | {factor} | {'yes' if r['within'] else 'no'} | "
            f"[{r['source'].split(',')[0]}]({r['url']}) |"
        )
    lines += [
        "",
        "| GPU | rows | published / predicted | validated |",
        "| --- | ---: | ---: | :---: |",
    ]
    for name, g in per_gpu(rows).items():
        lines.append(
            f"| {name} | {g['rows']} | {g['low']:.2f}-{g['high']:.2f} | "
            f"{'yes' if g['validated'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", metavar="PATH", help="write the tables as markdown here")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON here")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if profilers/timing/gpu_model/validation.py differs")  # fmt: skip
    args = ap.parse_args(argv)
    rows = compare()
    text = render_markdown(rows)
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.check and as_table(rows) != validation.CHECKED:
        print("error: profilers/timing/gpu_model/validation.py's CHECKED differs from these "
              f"figures: {as_table(rows)}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
