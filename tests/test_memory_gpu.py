"""The failures explained on a real GPU (run by .ci/gpu_checks.sh, skipped without one): a tensor
made on the CPU mid-forward, the default (foreach) optimizer stepped before the model moved, and
a real out-of-memory error from a huge allocation, caught by the script, whose report names the
lines holding the memory. The same scripts as under --fake-cuda: the texts must agree."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import profilers
from tests.profiler_helpers import line_of, requires_cuda

pytestmark = [requires_cuda, pytest.mark.gpu]

HERE = __file__.rsplit("/", 1)[-1]
TENSOR_ITERATOR = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)


def where(failure: dict[str, object]) -> tuple[str, object]:
    return str(failure["file"]).rsplit("/", 1)[-1], failure["line"]


def test_a_tensor_made_on_the_cpu_mid_forward_on_a_gpu():
    with profilers.profile(kernel_timing=False, memory=True) as prof:
        fc = nn.Linear(8, 4).to("cuda:0")
        with pytest.raises(RuntimeError) as raised:
            fc(torch.randn(2, 8, device="cuda:0")) * torch.ones(4)  # @fails
    assert str(raised.value) == TENSOR_ITERATOR
    failure = prof.report().memory["failure"]  # type: ignore[index]
    assert (failure["kind"], failure["op"]) == ("device_mismatch", "mul.Tensor")
    assert where(failure) == (HERE, line_of("fails"))
    assert failure["fixes"][0].startswith("made on the CPU by torch.ones at ")


def test_the_default_optimizer_stepped_before_the_model_moved_on_a_gpu():
    """torch picks the foreach path for CUDA tensors; the grouping lets a float32 host state
    through (as a step counter), and the foreach kernel's slow path raises TensorIterator's
    words: what the fake GPU raises (tests/test_memory_foreach.py)."""
    with profilers.profile(kernel_timing=False, memory=True) as prof:
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()  # @first_step
        model.to("cuda:0")
        model(torch.randn(3, 4, device="cuda:0")).sum().backward()
        with pytest.raises(RuntimeError) as raised:
            opt.step()  # @second_step
    assert str(raised.value) == TENSOR_ITERATOR
    failure = prof.report().memory["failure"]  # type: ignore[index]
    assert failure["op"] == "_foreach_add_.List"
    assert where(failure) == (HERE, line_of("second_step"))
    assert failure["fixes"] == [
        f"the optimizer's state 'momentum_buffer' (SGD) (made at {failure['file']}:"
        f"{line_of('first_step')}) is on the cpu: the optimizer was built, stepped or loaded "
        "before the model moved to cuda:0; build it (or load its state) after model.to(device)"
    ]


def test_a_real_out_of_memory_error_names_the_lines_holding_the_memory():
    with profilers.profile(kernel_timing=False, memory=True) as prof:
        kept = torch.empty(16 << 20, device="cuda:0")  # 64 MiB  # @kept
        try:
            torch.empty(1 << 50, device="cuda:0")  # 4 PiB: more than any GPU  # @huge
        except torch.OutOfMemoryError:
            pass  # caught by the script: the run goes on, the report still says it
        assert kept.numel() == 16 << 20
    report = prof.report()
    failure = report.memory["failure"]  # type: ignore[index]
    assert failure["kind"] == "out_of_memory"
    assert where(failure) == (HERE, line_of("huge"))
    assert (failure["device"], failure["requested_bytes"]) == ("cuda:0", 4 << 50)
    held = {h["line"]: h["bytes"] for h in failure["held"] if h["file"].endswith(HERE)}
    assert held == {line_of("kept"): 64 << 20}

    from gpuwatch.output.memory import failure_lines

    lines = failure_lines(report)
    assert lines[0].startswith(f"OUT OF MEMORY on cuda:0 at {failure['file']}:{line_of('huge')}")
    assert any(f"{failure['file']}:{line_of('kept')}  64.0 MiB" in line for line in lines[1:])
