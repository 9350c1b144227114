"""--fake-cuda from the command line: an unmodified script runs in a process of its own and the
summary and report say it was simulated; its options are refused without it.

NB: not in test_fake_cuda.py, whose tests all run on both counting paths (``both_paths``): that
fixture switches ``profilers.profile()`` in this process, which a command run in a process of its
own never sees, so there both runs were the same command twice."""

from __future__ import annotations

import pytest

from tests import conftest
from tests.helpers import gpuwatch_here, run_gpuwatch

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
]

TRAIN = """\
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(8, 2).to(device)
opt = torch.optim.AdamW(model.parameters())
for step in range(3):
    loss = model(torch.randn(4, 8).to(device)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"loss {loss.item():.3f}")
"""


@pytest.mark.slow
def test_profile_fake_cuda_runs_an_unmodified_script_and_says_it_was_simulated(tmp_path):
    from gpuwatch.output.load import load_report

    (tmp_path / "train.py").write_text(TRAIN)
    done = run_gpuwatch(
        ["profile", "--fake-cuda", "--fake-values", "placeholder", "--json", "run.json"]
        + ["train.py"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["loss 0.000"] * 3  # the placeholders the script read
    assert "SIMULATED: --fake-cuda, 1 fake GPU, placeholder values" in done.stderr
    assert "kernel time: not measured (--fake-cuda" in done.stderr
    assert "3 scalars (0)" in done.stderr
    report = load_report(tmp_path / "run.json")  # validated against the published schema
    assert report.options.fake_cuda.to_dict() == {
        "devices": 1,
        "values": "placeholder",
        "placeholders": {"values": 3, "host_copies": 0, "sizes": 0},
        "memory_bytes": 80 * 1024**3,  # each simulated GPU's (--fake-memory)
    }
    assert {"device": "cuda:0", "name": "gpuwatch fake CUDA device"} in report.devices
    assert report.totals.h2d.count == 2 + 3 and report.totals.syncs.by_cause == {
        "copy_to_device": 5,
        "item": 3,
    }


def test_the_fake_gpus_options_go_with_fake_cuda(tmp_path):
    # NB: without a compiler, --fake-cuda says so in one line: test_fake_cuda_builds.py's
    # test_where_it_cannot_run_plain_and_live_say_one_line_and_exit_2, plain and --live.
    # Refused before anything runs: the CLI's main() in this process says what a process would.
    (tmp_path / "train.py").write_text(TRAIN)
    bad = gpuwatch_here(["profile", "--fake-gpus", "2", "train.py"], tmp_path)
    assert bad.returncode == 2 and "--fake-gpus goes with --fake-cuda" in bad.stderr
    bad = gpuwatch_here(["profile", "--fake-values", "real", "train.py"], tmp_path)
    assert bad.returncode == 2 and "--fake-values goes with --fake-cuda" in bad.stderr
