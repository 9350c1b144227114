"""Shared by the profiler tests: fake CUDA tensors, source markers, line lookups."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import profilers


def torch_release() -> tuple[int, int]:
    """``(2, 13)`` of this torch."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: Detaches each AccumulateGrad adds to a backward beyond 2.10's one: torch 2.9 stores a
#: leaf's first gradient through one more ``detach`` (NB: its "stealable grad" check in
#: torch/csrc/autograd/functions/accumulate_grad.h counted uses with
#: ``at::caching::adjusted_use_count``; 2.10 on ask ``impl::is_tensor_stealable``). Op totals
#: only: no copy, sync or byte differs.
EXTRA_DETACHES = 1 if torch_release() < (2, 10) else 0


def fake_mode() -> FakeTensorMode:
    """Tensors that say cuda:0/cuda:1 on a CPU-only torch; .item() and nonzero can run."""
    return FakeTensorMode(shape_env=ShapeEnv())


def line_of(marker: str) -> int:
    """The line of the caller's file that carries ``# @marker``."""
    caller = inspect.stack()[1].filename
    for i, text in enumerate(Path(caller).read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# @{marker}"):
            return i
    raise AssertionError(f"no line marked @{marker}")


def line_at(
    report: profilers.Report, line: int, file_suffix: str | None = None
) -> profilers.LineStats:
    hits = [
        s
        for s in report.lines
        if s.line == line and (file_suffix is None or s.file.endswith(file_suffix))
    ]
    assert len(hits) == 1, (
        f"expected one entry at line {line}, got {[(s.file, s.line) for s in report.lines]}"
    )
    return hits[0]


def copies(**kw: int) -> dict[str, int]:
    d = {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0}
    d.update(kw)
    return d


def never_pinned(_t: torch.Tensor) -> bool:
    return False


def always_pinned(_t: torch.Tensor) -> bool:
    return True


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
