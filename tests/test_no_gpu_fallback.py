"""A CUDA script on a machine whose torch sees no GPU falls back to the CPU: its report must say
so (and point at --fake-cuda) rather than read as a clean run with "No hints"."""

from __future__ import annotations

import json

import pytest
import torch

import profilers
from tests import conftest
from tests.helpers import run_gpuwatch
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
    from gpuwatch.report.load import load_report

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
