"""The textbook "optimizer stepped before the model moved" with the optimizer's own defaults: on
a GPU, SGD and Adam left to choose take the foreach path (fused when asked), which fails where
the for-loop path does not: in a ``_foreach_*`` op (TensorIterator's words, from the slow path a
foreach kernel takes for tensors on two devices), in ``_fused_adam_`` (its wrapper's), or, for a
state on another GPU, in torch's C++ grouping of the tensors by device, which no op raises. The
fake GPU raises each as a GPU does, in both value modes, and the report names the lines and the
fix."""

from __future__ import annotations

import json
import textwrap
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.helpers import gpuwatch_here
from tests.profiler_helpers import line_of

pytestmark = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)

HERE = __file__.rsplit("/", 1)[-1]
TENSOR_ITERATOR = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)
#: torch's own check of foreach grouping, as a GPU raises it. NB: its ending differs by release
#: (2.9: "... float32/64 notwithstanding"; 2.13: "..., and optimizer states that can be bfloat16
#: for mixed-precision training"; ATen/native/ForeachUtils.h), so the common start is compared.
GROUPING = (
    "Tensors of the same index must be on the same device and the same dtype except `step` "
    "tensors that can be CPU and float32/64"
)


def ours_or_fake(exc: BaseException) -> list[str]:
    names = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    return [n for n in names if "_subclasses" in n or "/fake_cuda/" in n]


def stepped_on_the_host_then_moved(make: Callable[[Any], torch.optim.Optimizer]) -> None:
    model = nn.Linear(4, 2)
    opt = make(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()  # @first_step
    model.to("cuda:0")  # @moved
    model(torch.randn(3, 4, device="cuda:0")).sum().backward()
    opt.step()  # @second_step


def fix_for(
    state: str, cls: str, file: str, wrong: str = "cpu", to: str = "cuda:0", made: int = 0
) -> str:
    return (
        f"the optimizer's state {state!r} ({cls}) (made at {file}:{made or line_of('first_step')}) is "
        f"on the {wrong}: the optimizer was built, stepped or loaded before the model moved to "
        f"{to}; build it (or load its state) after model.to(device)"
    )


CASES = [
    pytest.param(
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "_foreach_add_.List",
        TENSOR_ITERATOR,
        ["momentum_buffer"],
        id="SGD-momentum",
    ),
    pytest.param(
        lambda ps: torch.optim.Adam(ps, lr=0.1),
        "_foreach_lerp_.Scalar",
        TENSOR_ITERATOR,
        ["exp_avg"],
        id="Adam",
    ),
    pytest.param(
        lambda ps: torch.optim.Adam(ps, lr=0.1, fused=True),
        "_fused_adam_.default",
        "Expected all tensors to be on the same device, but got exp_avgs is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method "
        "wrapper_CUDA___fused_adam_)",
        ["exp_avg", "exp_avg_sq"],
        id="Adam-fused",
    ),
]


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.parametrize(("make", "op", "text", "states"), CASES)
def test_the_optimizers_default_path_fails_as_on_a_gpu_and_is_explained(
    both_values: str, make: Any, op: str, text: str, states: list[str]
) -> None:
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(), profilers.profile(kernel_timing=False, count_ops=True) as prof:
        with pytest.raises(RuntimeError) as raised:
            stepped_on_the_host_then_moved(make)
    exc = raised.value
    assert type(exc) is RuntimeError
    assert str(exc) == text
    assert ours_or_fake(exc) == []
    failure = prof.report().memory["failure"]  # type: ignore[index]
    assert failure["op"] == op  # the foreach (or fused) op: the path a GPU takes
    assert (failure["file"].rsplit("/", 1)[-1], failure["line"]) == (HERE, line_of("second_step"))
    cls = "SGD" if states == ["momentum_buffer"] else "Adam"
    assert failure["fixes"] == [fix_for(s, cls, failure["file"]) for s in states]
    on_host = [t for t in failure["tensors"] if t["device"] == "cpu"]
    assert on_host and all(t["made_by"]["line"] == line_of("first_step") for t in on_host)
    moved = [t for t in failure["tensors"] if t["device"] == "cuda:0" and t["made_by"]["moved"]]
    assert moved and all(t["made_by"]["line"] == line_of("moved") for t in moved)


@pytest.mark.fake_cuda
def test_a_state_left_on_another_gpu_fails_in_torchs_grouping_and_is_explained(
    both_values: str,
) -> None:
    """No op raises this one (torch._C._group_tensors_by_device_and_dtype): the profile
    explains the error that leaves it from the optimizer in the error's frames."""
    from profilers.fake_cuda.harness import fake_cuda

    with pytest.raises(RuntimeError) as raised:
        with fake_cuda(2), profilers.profile(kernel_timing=False, count_ops=True) as prof:
            model = nn.Linear(4, 2).to("cuda:0")
            opt = torch.optim.Adam(model.parameters(), lr=0.1)
            model(torch.randn(3, 4, device="cuda:0")).sum().backward()
            opt.step()  # @stepped_on_gpu0
            model.to("cuda:1")  # @moved_to_gpu1
            model(torch.randn(3, 4, device="cuda:1")).sum().backward()
            opt.step()  # @failing_step
    assert str(raised.value).startswith(GROUPING)  # torch's own check, as on a GPU
    failure = prof.report().memory["failure"]  # type: ignore[index]
    assert failure["kind"] == "device_mismatch"
    assert (failure["file"].rsplit("/", 1)[-1], failure["line"]) == (
        HERE,
        line_of("failing_step"),
    )
    assert failure["source"] == "opt.step()  # @failing_step"
    # weight (2, 4) and bias (2,): each listed on cuda:1, then its two states left on cuda:0
    assert [(t["arg"], t["device"], t["shape"]) for t in failure["tensors"]] == [
        ("params[0]", "cuda:1", [2, 4]),
        ("exp_avg of params[0]", "cuda:0", [2, 4]),
        ("exp_avg_sq of params[0]", "cuda:0", [2, 4]),
        ("params[1]", "cuda:1", [2]),
        ("exp_avg of params[1]", "cuda:0", [2]),
        ("exp_avg_sq of params[1]", "cuda:0", [2]),
    ]
    assert failure["tensors"][0]["made_by"]["line"] == line_of("moved_to_gpu1")
    assert failure["tensors"][1]["made_by"]["line"] == line_of("stepped_on_gpu0")
    assert failure["fixes"] == [
        fix_for(s, "Adam", failure["file"], "cuda:0", "cuda:1", line_of("stepped_on_gpu0"))
        for s in ("exp_avg", "exp_avg_sq")
    ]


SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch import nn

    model = nn.Linear(4, 2).to("cuda:0")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4, device="cuda:0")).sum().backward()
    opt.step()
    model.to("cuda:1")
    model(torch.randn(3, 4, device="cuda:1")).sum().backward()
    opt.step()
    """
)


@pytest.mark.fake_cuda
def test_the_cli_explains_the_grouping_error_the_script_lets_out(both_values: str, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = gpuwatch_here(
        ["profile", "--fake-cuda", "--fake-gpus", "2", "--fake-values", both_values]
        + ["--no-gpu-stats", "--json", "r.json", "train.py"],
        tmp_path,
    )
    assert done.returncode == 1, done.stderr
    raised = [ln for ln in done.stderr.splitlines() if ln.startswith(f"RuntimeError: {GROUPING}")]
    assert len(raised) == 1  # the script's own traceback
    failure = json.loads((tmp_path / "r.json").read_text())["memory"]["failure"]
    assert (failure["file"], failure["line"], failure["function"]) == ("train.py", 10, "<module>")
    assert failure["fixes"][0].startswith(
        "the optimizer's state 'exp_avg' (Adam) (made at train.py:7) is on the cuda:0"
    )
    assert "DEVICE MISMATCH at train.py:10 (opt.step())" in done.stdout + done.stderr


def test_the_grouping_checks_dtype_half_is_not_called_a_device_mismatch() -> None:
    """The same C++ check refuses a float16 state beside float32 parameters on one device:
    nothing to say about devices, so no failure is claimed."""
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    for state in opt.state.values():
        state["exp_avg"] = state["exp_avg"].half()
    with pytest.raises(RuntimeError, match="Tensors of the same index"):
        with profilers.profile(kernel_timing=False, memory=True) as prof:
            opt.step()
    memory = prof.report().memory
    assert memory is not None and memory["failure"] is None
