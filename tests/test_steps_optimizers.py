"""One iteration of a training loop is one step, however many optimizers step in it
(profilers/patches.py, count_steps): a GAN's two optimizers end one step per batch, not two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import profilers
from tests import conftest
from tests.helpers import run_gpuwatch

GAN = Path(__file__).parent / "programs" / "gan.py"


def _steps(loop) -> int:
    """The steps a profile of ``loop(sgd)`` counts, ``sgd()`` making an optimizer."""
    model = nn.Linear(4, 1)

    def sgd() -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1)

    with profilers.profile(kernel_timing=False) as prof:
        loop(model, sgd)
    steps = prof.report().steps
    assert steps is not None and steps["source"] == "optimizer"
    return int(steps["count"])


def _batches(n: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=1)


def test_optimizers_stepped_one_after_another_end_one_step_per_iteration():
    def gan(model, sgd):  # D then G, with no DataLoader
        d, g = sgd(), sgd()
        for _ in range(4):
            for opt in (d, g):
                model(torch.ones(1, 4)).sum().backward()
                opt.step()

    assert _steps(gan) == 4


def test_each_step_of_one_optimizer_ends_a_step_whatever_else_runs():
    def accumulated(model, sgd):  # 6 batches, one step() per 3
        opt = sgd()
        for i, (x,) in enumerate(_batches(6)):
            model(x).sum().backward()
            if i % 3 == 2:
                opt.step()

    def scheduled(model, sgd):  # an LR scheduler's step() is not an optimizer's
        opt = sgd()
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        for _ in range(3):
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
            sched.step()

    assert _steps(accumulated) == 2
    assert _steps(scheduled) == 3


def test_optimizers_stepped_in_alternate_batches_end_one_step_per_batch():
    def alternate(model, sgd):
        opts = sgd(), sgd()
        for i, (x,) in enumerate(_batches(5)):
            model(x).sum().backward()
            opts[i % 2].step()

    assert _steps(alternate) == 5


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
@pytest.mark.parametrize("mode", ["both", "alternate"])
def test_a_gan_counts_one_step_per_batch_under_fake_cuda(tmp_path, mode):
    done = run_gpuwatch(
        ["profile", "-q", "--fake-cuda", "--json", "r.json", str(GAN), mode], tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["totals"]["steps"] == {"count": 6, "source": "optimizer"}  # 48 rows / 8
    sites = {s["source"].split("# @")[-1]: s for s in doc["sites"] if "# @" in s["source"]}
    batch = sites["batch"]  # one pageable copy per step, in every step
    assert batch["h2d"]["count"] == 6 and batch["steps_active"] == 6
    assert batch["syncs"]["by_cause"] == {"copy_to_device": 6}
    # both: two .item() per step (D's and G's), each line in every step; alternate: one
    each = 6 if mode == "both" else 3
    for name in ("sync_d", "sync_g"):
        assert sites[name]["syncs"] == {"count": each, "by_cause": {"item": each}}
        assert sites[name]["steps_active"] == each
    # 6 batches + the two models' 4 + 4 parameters moved before the first step
    assert doc["totals"]["h2d"]["count"] == 14
    assert doc["totals"]["syncs"]["by_cause"]["item"] == 6 * (2 if mode == "both" else 1)
