"""``gpuwatch report run.json`` prints the hints the run printed, the same ones in the same order:
they are computed from what the JSON keeps (a line's copy origins and loader settings, its
steps, the time and what-if sections), never from the ops beyond the 8 a line keeps there."""

from __future__ import annotations

import json
import sys

import pytest

from gpuwatch.analysis.hints import hints
from gpuwatch.cli.main import main
from profilers import Report
from tests import conftest

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)

SCRIPT = """\
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.ones(8), torch.tensor(i % 2)


dev = "cuda:0"
model = torch.nn.Linear(8, 2).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(DataLoader(Slow(), batch_size=2)):
    x, y = x.to(dev), y.to(dev)
    # ten ops on one line, the factory among them: the JSON keeps 8 of a line's ops
    z = (torch.randn(2, 8) * 2 + 1).relu().sigmoid().tanh().abs().neg().exp().log1p().to(dev)
    a = torch.zeros(2, 8).to(dev)
    b = torch.ones(2, 8).to(dev)
    loss = torch.nn.functional.cross_entropy(model(x + z + a + b), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step % 4 == 0:
        print(loss.item())
"""


def _hints_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Hints, "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    return lines[start:end]


@pytest.mark.fake_cuda
@needs_fake_cuda
@pytest.mark.parametrize("flags", [[], ["--gpu", "H100", "--what-if"]])
def test_report_prints_the_hints_the_run_printed(tmp_path, capsys, monkeypatch, flags):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    path = tmp_path / "run.json"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["gpuwatch"])
    assert main(["profile", "--fake-cuda", *flags, "--json", str(path), "train.py"]) == 0
    ran = _hints_block(capsys.readouterr().err)
    assert main(["report", str(path)]) == 0
    again = _hints_block(capsys.readouterr().out)
    assert ran == again
    # and the hints are the ones the run found: the factory at the line of ten ops among them
    r = Report.load(path)
    kinds = {(h.kind, h.where) for h in hints(r)}
    # three neighbours, one fix (line 21's tensor made from randn by ten more ops there)
    assert ("created_on_cpu", "train.py:21-23") in kinds
    assert ("loader_pin", "train.py:19") in kinds
    assert any(k == "log_every_step" and w == "train.py:29" for k, w in kinds)
    line = next(s for s in r.lines if s.line == 21)
    assert len(json.loads(path.read_text())["sites"][0]["top_ops"]) <= 8
    assert line.origins["factory"].op == "randn"
