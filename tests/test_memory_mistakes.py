"""The device mismatches the textbooks warn about, on the fake GPU: each raises the RuntimeError a
GPU raises (its text, no fake-tensor frames), and the report names the failing line, each tensor
of the op with the line that made it, and the fix."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.profiler_helpers import line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
]

HERE = __file__.rsplit("/", 1)[-1]


def failing(work: Callable[[], Any]) -> tuple[BaseException, dict[str, Any]]:
    """Runs ``work`` on a fake GPU under the profiler as ``--fake-cuda`` does (every op counted,
    memory tracked); the error it raised and the failure the report explains."""
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(), profilers.profile(kernel_timing=False, count_ops=True) as prof:
        with pytest.raises(RuntimeError) as raised:
            work()
    memory = prof.report().memory
    assert memory is not None and memory["failure"] is not None
    return raised.value, memory["failure"]


def where(failure: dict[str, Any]) -> tuple[str, int]:
    return failure["file"].rsplit("/", 1)[-1], failure["line"]


def ours_or_fake(exc: BaseException) -> list[str]:
    """The frames of ``exc``'s traceback a GPU run would not have."""
    names = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    return [n for n in names if "_subclasses" in n or "/fake_cuda/" in n]


class MaskMidForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        mask = torch.ones(4)  # @made
        return h * mask  # @fails


def test_a_tensor_made_on_the_cpu_mid_forward():
    def work() -> None:
        model = MaskMidForward().to("cuda:0")
        model(torch.randn(2, 8, device="cuda:0"))  # @call

    exc, failure = failing(work)
    # the exception a GPU raises: a plain RuntimeError, TensorIterator's text (mul)
    assert type(exc) is RuntimeError
    assert str(exc) == (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!"
    )
    assert ours_or_fake(exc) == []
    assert failure["kind"] == "device_mismatch"
    assert failure["op"] == "mul.Tensor"
    assert where(failure) == (HERE, line_of("fails"))
    assert failure["chain"][0].endswith(f"{HERE}:{line_of('call')} work")  # the caller
    h, mask = failure["tensors"]
    assert (h["device"], h["shape"], h["dtype"]) == ("cuda:0", [2, 4], "float32")
    assert "fix" not in h
    assert (mask["arg"], mask["device"], mask["shape"]) == ("other", "cpu", [4])
    assert mask["made_by"]["op"] == "ones" and mask["made_by"]["line"] == line_of("made")
    assert failure["fixes"] == [
        f"made on the CPU by torch.ones at {mask['made_by']['file']}:{line_of('made')}: "
        "pass device=x.device (here cuda:0)"
    ]


class PlainAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.scale = torch.full((4,), 0.5)  # @attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale  # @scaled


def test_an_unregistered_buffer_stays_on_the_cpu():
    def work() -> None:
        model = PlainAttribute().to("cuda:0")
        model(torch.randn(2, 8, device="cuda:0"))

    exc, failure = failing(work)
    assert type(exc) is RuntimeError
    assert where(failure) == (HERE, line_of("scaled"))
    (fix,) = failure["fixes"]
    assert fix.startswith(
        f"scale is a plain attribute of PlainAttribute (made at {failure['file']}:"
        f"{line_of('attribute')}), not a registered buffer: it stayed on the cpu when the "
        "model moved to cuda:0"
    )
    assert fix.endswith("self.register_buffer('scale', ...)")


def test_an_optimizer_stepped_before_the_model_moved():
    def work() -> None:
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()  # @first_step
        model.to("cuda:0")  # @moved
        model(torch.randn(3, 4, device="cuda:0")).sum().backward()
        opt.step()  # @second_step

    exc, failure = failing(work)
    assert type(exc) is RuntimeError
    assert where(failure) == (HERE, line_of("second_step"))
    by_device = {t["device"]: t for t in failure["tensors"]}
    assert by_device["cpu"]["made_by"]["line"] == line_of("first_step")
    assert by_device["cuda:0"]["made_by"]["line"] == line_of("moved")
    assert by_device["cuda:0"]["made_by"]["moved"] is True
    assert failure["fixes"] == [
        f"the optimizer's state 'momentum_buffer' (SGD) (made at {failure['file']}:"
        f"{line_of('first_step')}) is on the cpu: the optimizer was built, stepped or loaded "
        "before the model moved to cuda:0; build it (or load its state) after "
        "model.to(device)"
    ]


def test_a_cpu_index_into_a_gpu_embedding():
    def work() -> None:
        emb = nn.Embedding(10, 4).to("cuda:0")
        ids = torch.tensor([1, 2])  # @ids
        emb(ids)  # @lookup

    exc, failure = failing(work)
    # NB: embedding is weight.index_select(0, indices) on a GPU: its wrapper's check speaks
    assert str(exc) == (
        "Expected all tensors to be on the same device, but got index is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method "
        "wrapper_CUDA__index_select)"
    )
    assert where(failure) == (HERE, line_of("lookup"))
    weight, ids = failure["tensors"]
    assert (weight["arg"], weight["device"], weight["shape"]) == ("weight", "cuda:0", [10, 4])
    assert (ids["arg"], ids["device"], ids["dtype"]) == ("indices", "cpu", "int64")
    assert failure["fixes"] == [
        f"a cpu index into an embedding on cuda:0 (made at {failure['file']}:{line_of('ids')})"
        ": move the indices where they are made, e.g. .to('cuda:0')"
    ]


def test_a_matmul_names_the_argument_as_the_gpu_kernel_does():
    def work() -> None:
        w = torch.randn(4, 3, device="cuda:0")
        torch.randn(2, 3) @ w.t()

    exc, failure = failing(work)
    assert str(exc) == (
        "Expected all tensors to be on the same device, but got mat2 is on cuda:0, different "
        "from other tensors on cpu (when checking argument in method wrapper_CUDA_mm)"
    )
    assert failure["op"] == "mm.default"
