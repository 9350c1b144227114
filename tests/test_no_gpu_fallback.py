"""A CUDA script on a machine whose torch sees no GPU falls back to the CPU: its report must say
so (and point at --fake-cuda) rather than read as a clean run with "No hints"."""

from __future__ import annotations

import json

import pytest
import torch

import profilers
from gpuwatch.output.text import NO_GPU_ERRORS
from tests import conftest
from tests.helpers import gpuwatch_here, run_gpuwatch
from tests.profiler_helpers import line_of

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch with no GPU")

SCRIPT = """\
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
w = torch.ones(4, 4, device=device)
for _ in range(3):
    loss = (w @ w).sum()
    print(f"loss {loss.item():.1f}")
"""


def test_a_question_answered_no_gpu_is_kept_with_its_line():
    with profilers.profile(kernel_timing=False) as prof:
        use = "cuda" if torch.cuda.is_available() else "cpu"  # @asked
        torch.cuda.device_count()  # a second question: the first one is what the report names
        (torch.ones(2, device=use) * 2).sum().item()
    r = prof.report()
    assert r.gpu_fallback == {
        "asked": "torch.cuda.is_available()",
        "answer": False,
        "file": r.gpu_fallback["file"],
        "line": line_of("asked"),
    }
    assert r.gpu_fallback["file"].endswith("test_no_gpu_fallback.py")
    assert profilers.Report.from_dict(r.to_dict()).gpu_fallback == r.gpu_fallback
    assert torch.cuda.is_available is not None and not hasattr(
        torch.cuda.is_available, "__wrapped__"
    )


def test_a_script_that_never_asks_says_nothing_of_it():
    with profilers.profile(kernel_timing=False) as prof:
        (torch.ones(2) * 2).sum().item()
    assert prof.report().gpu_fallback is None
    assert "gpu_fallback" not in prof.report().to_dict()


@pytest.mark.fake_cuda
@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
def test_on_a_fake_gpu_the_answer_is_yes_and_nothing_is_said():
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(), profilers.profile(kernel_timing=False) as prof:
        use = "cuda" if torch.cuda.is_available() else "cpu"
        torch.ones(2, device=use).sum().item()
    assert prof.report().gpu_fallback is None


@pytest.mark.fake_cuda
@pytest.mark.slow
def test_the_summary_and_json_say_it_ran_on_the_cpu_and_suggest_fake_cuda(tmp_path):
    from gpuwatch.output.load import load_report

    (tmp_path / "train.py").write_text(SCRIPT)
    done = run_gpuwatch(["profile", "--json", "r.json", "train.py"], tmp_path, COLUMNS="300")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["loss 64.0"] * 3  # the script's own output, untouched
    said = " ".join(done.stderr.split())
    assert (
        "NO GPU: the script asked torch.cuda.is_available() at train.py:2, got False and ran "
        "on the CPU" in said
    )
    assert "Run it with --fake-cuda" in said
    assert "No hints: the script ran on the CPU" in said and "no line copies" not in said
    report = load_report(tmp_path / "r.json")  # validated against the published schema
    assert json.loads((tmp_path / "r.json").read_text())["gpu_fallback"] == {
        "asked": "torch.cuda.is_available()",
        "answer": False,
        "file": "train.py",
        "line": 2,
    }
    assert report.gpu_fallback is not None


NEEDS_A_GPU = """\
import torch
x = torch.randn(3, device="cuda")
print(x.sum().item())
"""


def test_a_script_that_stops_for_want_of_a_gpu_gets_no_verdict_and_a_pointer_to_fake_cuda(
    tmp_path,
):
    (tmp_path / "train.py").write_text(NEEDS_A_GPU)
    done = gpuwatch_here(["profile", "--no-gpu-stats", "--json", "r.json", "train.py"], tmp_path)
    assert done.returncode == 1  # the script's own exit: torch raised
    said = " ".join(done.stderr.replace("│", " ").split())  # the summary unwrapped, no borders
    # NB: the CPU build raises "Torch not compiled with CUDA enabled", a CUDA build with no
    # driver "Found no NVIDIA driver on your system": both are named as the reason
    error = json.loads((tmp_path / "r.json").read_text())["error"]
    assert any(text in error for text in NO_GPU_ERRORS), error
    # (the start of the error: a long one, with a URL, wraps inside its words)
    assert f"NO GPU: the script stopped for want of a CUDA GPU ({error[:38]}" in said
    assert "Run it with --fake-cuda" in said
    assert "where the time goes: no verdict: the script ran no torch op before it stopped" in said
    assert "-bound" not in said  # no verdict on a run that never reached a GPU
    assert "No hints: the script stopped for want of a GPU (see NO GPU above)." in said


def test_no_verdict_without_a_step_or_a_gpu(tmp_path):
    (tmp_path / "early.py").write_text("import a_module_not_there\n")
    (tmp_path / "cpu.py").write_text(
        "import torch\nx = torch.ones(64)\nfor _ in range(50):\n    x = x * 1.0\n"
    )
    (tmp_path / "steps.py").write_text(
        "import torch\nw = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(w.parameters(), lr=0.1)\n"
        "for _ in range(4):\n    w(torch.ones(2, 4)).sum().backward()\n    opt.step()\n"
    )
    said = {}
    for name in ("early", "cpu", "steps"):
        done = gpuwatch_here(["profile", "--no-gpu-stats", f"{name}.py"], tmp_path)
        said[name] = " ".join(done.stderr.replace("│", " ").split())
    # the fast path counts no ops: a script that ran some is not said to have run none
    done = gpuwatch_here(["profile", "--no-gpu-stats", "--no-kernel-timing", "cpu.py"], tmp_path)
    fast = " ".join(done.stderr.replace("│", " ").split())
    assert "no verdict: no step ended and no GPU ran" in fast and "-bound" not in fast
    assert "ran no torch op" not in fast
    assert (
        "where the time goes: no verdict: the script ran no torch op before it stopped "
        "(ModuleNotFoundError: No module named 'a_module_not_there'" in said["early"]
    )
    assert "no verdict: no step ended and no GPU ran" in said["cpu"]
    assert "costliest line" in said["cpu"]  # the host's time by line is still told
    for name in ("early", "cpu"):
        assert "-bound" not in said[name], name
    assert "no verdict" not in said["steps"] and "-bound: " in said["steps"]
