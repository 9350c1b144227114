"""``gpuwatch profile``'s options about the GPU it runs on: the fake GPU's checks before the
script starts, and ``--gpu NAME`` / ``--what-if`` (a model of a named GPU, issue 26)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpuwatch.errors import CliError


def add_gpu_args(p: Any) -> None:
    p.add_argument(
        "--gpu",
        metavar="NAME",
        default=None,
        help="with --fake-cuda: predict the run on the GPU NAME (H100, A100, L4, T4, ...): "
        "GPU busy and idle time, verdicts and what-ifs from a model of it, marked PREDICTED",
    )
    p.add_argument(
        "--what-if",
        action="store_true",
        help="after the summary, print what each fix would save per step (replayed from the "
        "recorded steps: with --fake-cuda --gpu, or on a GPU with kernel timing)",
    )


def check_gpu(args: argparse.Namespace) -> None:
    """``--gpu NAME``: a GPU the model knows (its canonical name kept in ``args.gpu``), and
    only where the GPU is simulated: a real run is measured, and predicting another GPU from
    it would mix measured and predicted figures."""
    if args.gpu is None:
        return
    if not args.fake_cuda:
        raise CliError(
            "--gpu predicts a named GPU under --fake-cuda; a run on this machine's GPUs is "
            "measured, not predicted (add --fake-cuda to predict for another GPU)"
        )
    if args.steps is not None:
        raise CliError("--gpu replays whole steps: it does not go with --steps")
    from profilers.timing.gpu_model.specs import UnknownGpuError, gpu_spec

    try:
        args.gpu = gpu_spec(args.gpu).name
    except UnknownGpuError as exc:
        raise CliError(str(exc)) from None


def check_fake_cuda(devices: int) -> None:
    """Builds the fake GPU's C++ half (once per torch) and tries it before the script starts,
    so that whatever stops it here is one line and exit 2, not an error inside the run (nor
    one lost in the --live child)."""
    from profilers.fake_cuda.harness import FakeCudaUnavailable
    from profilers.fake_cuda.harness import check_fake_cuda as check

    try:
        check(devices)
    except FakeCudaUnavailable as exc:
        raise CliError(str(exc)) from None


@contextmanager
def fake_cuda_errors(fake_cuda: int) -> Iterator[None]:
    """A fake GPU that cannot start is one line and exit 2 (the script never ran)."""
    if not fake_cuda:
        yield
        return
    from profilers.fake_cuda.harness import FakeCudaUnavailable

    try:
        yield
    except FakeCudaUnavailable as exc:
        raise CliError(str(exc)) from None
