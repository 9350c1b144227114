"""``--fake-values real``: the fake GPU's tensors hold real values, computed on the host, so a
script reads back what a GPU gives and takes the branches it takes there, while its copies,
syncs and lines are counted as in the placeholder mode (profilers/fake_cuda/real.py)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.helpers import run_gpuwatch
from tests.profiler_helpers import copies, line_at, line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
]

ROOT = Path(__file__).resolve().parent.parent


def fake_cuda(values: str = "real", devices: int = 1):
    from profilers.fake_cuda.harness import fake_cuda

    return fake_cuda(devices, values=values)


def train_with_branches(path: Path) -> list[tuple[str, int]]:
    """A loop whose path depends on values read back from the GPU: a NaN check (a corrupt
    batch at step 2), a checkpoint when the loss improves, early stopping when it does not."""
    events: list[tuple[str, int]] = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.3 * torch.randn(64, 1)
    best, bad = math.inf, 0
    for step in range(40):
        xb, yb = x.to(device), y.to(device)
        if step == 2:
            xb = xb * float("nan")
        loss = nn.functional.mse_loss(model(xb), yb)
        if torch.isnan(loss):  # @nan_check
            events.append(("nan", step))
            continue
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        if value < best - 0.05:
            best, bad = value, 0
            torch.save(model.state_dict(), path)  # @save
            events.append(("save", step))
        else:
            bad += 1
            if bad >= 2:
                events.append(("stop", step))
                break
    return events


@pytest.mark.slow
def test_a_script_branching_on_gpu_values_takes_its_cpu_path_and_counts_its_copies(tmp_path):
    on_cpu = train_with_branches(tmp_path / "cpu.pt")  # the same script, no gpuwatch
    kinds = [kind for kind, _ in on_cpu]
    assert kinds.count("nan") == 1 and kinds[-1] == "stop" and kinds.count("save") >= 3
    saves = kinds.count("save")

    with fake_cuda("real") as harness, profilers.profile(kernel_timing=False) as prof:
        simulated = train_with_branches(tmp_path / "gpu.pt")
    assert simulated == on_cpu
    assert harness.placeholders.to_dict() == {"values": 0, "host_copies": 0, "sizes": 0}
    r = prof.report()
    # each save copies the state_dict's 2 tensors to the host: weight 4 floats + bias 1
    assert line_at(r, line_of("save")).d2h.counts() == copies(
        count=2 * saves, bytes=5 * 4 * saves, pageable=2 * saves
    )
    steps_run = on_cpu[-1][1] + 1
    assert line_at(r, line_of("nan_check")).syncs.by_cause == {"item": steps_run}
    saved = torch.load(tmp_path / "gpu.pt", map_location="cpu")
    expected = torch.load(tmp_path / "cpu.pt")
    assert torch.allclose(saved["weight"], expected["weight"], atol=1e-5)

    # The placeholders (losses of 0.0, never NaN) take another path: one save, then a stop.
    with fake_cuda("placeholder"), profilers.profile(kernel_timing=False) as prof:
        assert train_with_branches(tmp_path / "ph.pt") == [("save", 0), ("stop", 2)]
    assert line_at(prof.report(), line_of("save")).d2h.count == 2


def test_values_sizes_and_memory_are_a_gpus():
    with fake_cuda("real"):
        host = torch.tensor([[1.0, -2.0], [0.0, 4.0]])
        t = host.to("cuda:0")
        assert t.device == torch.device("cuda:0") and t.is_cuda
        assert t.sum().item() == 3.0 and bool(t.max() > 3) is True
        assert t.cpu().equal(host) and t.tolist() == host.tolist()
        assert t.nonzero().tolist() == [[0, 0], [0, 1], [1, 1]]
        assert t[t > 0].tolist() == [1.0, 4.0]
        assert torch.unique(t).cpu().tolist() == [-2.0, 0.0, 1.0, 4.0]
        v = t.view(4)  # a view holds no memory of its own
        v[0] = 10.0
        assert t[0, 0].item() == 10.0
        # 16 bytes of data, in CUDA's 512-byte blocks: t (a view shares it) and t > 0's mask
        del v
        assert torch.cuda.memory_allocated() == 512
        assert repr(t) == "tensor([[10., -2.],\n        [ 0.,  4.]], device='cuda:0')"


def test_device_mismatches_raise_what_a_gpu_raises():
    with fake_cuda("real", devices=2):
        a = torch.ones(3).to("cuda:0")
        assert (a + torch.tensor(2.0)).tolist() == [3.0, 3.0, 3.0]  # a host scalar is fine
        with pytest.raises(RuntimeError, match="same device.*cuda:0 and cpu"):
            a + torch.ones(3)
        with pytest.raises(RuntimeError, match="same device.*cuda:0 and cuda:1"):
            a * torch.ones(3).to("cuda:1")
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.zeros(2, device="cuda:2")
        b = a.to("cuda:1")  # between GPUs: a copy, fine
        assert b.device == torch.device("cuda:1") and b.tolist() == [1.0, 1.0, 1.0]


def test_gpu_random_ops_draw_from_the_gpus_generator():
    with fake_cuda("real"):
        torch.manual_seed(0)
        host_first = torch.rand(3)
        torch.manual_seed(0)
        a = torch.randn(4, device="cuda")
        drop = nn.functional.dropout(torch.ones(1000).to("cuda"), 0.5)
        host_then = torch.rand(3)
        torch.cuda.manual_seed(0)
        again = torch.randn(4, device="cuda")
        # the host's stream is untouched by GPU draws (as on a GPU); a GPU seed repeats them
        assert host_then.equal(host_first)
        assert again.cpu().equal(a.cpu())
        kept = drop.cpu()
        # a saved GPU RNG state returns to that very draw (checkpointing recomputes dropout)
        state = torch.cuda.get_rng_state()
        first = torch.rand(5, device="cuda").cpu()
        torch.cuda.set_rng_state(state)
        assert torch.rand(5, device="cuda").cpu().equal(first)
    assert set(kept.unique().tolist()) == {0.0, 2.0} and 400 < int((kept > 0).sum()) < 600


def test_a_cuda_graph_replay_computes_from_its_static_input():
    with fake_cuda("real"):
        static = torch.ones(3).to("cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = static * 2 + 1
        static.copy_(torch.tensor([1.0, 2.0, 3.0]))
        g.replay()
        assert out.tolist() == [3.0, 5.0, 7.0]


@pytest.mark.slow
def test_tiny_gpt_trains_under_fake_cuda_with_decreasing_losses(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "demos"))
    try:
        import tiny_gpt
    finally:
        sys.path.remove(str(ROOT / "demos"))
    args = ["--steps", "30", "--eval-every", "10", "--eval-iters", "2", "--layers", "1"]
    args += ["--width", "32", "--batch", "8", "--block", "16", "--vocab", "8", "--lr", "1e-2"]
    args += ["--out", str(tmp_path / "ckpt.pt")]
    with fake_cuda("real"), profilers.profile(kernel_timing=False) as prof:
        val = tiny_gpt.main(args)
    said = capsys.readouterr().out
    assert len(val) == 4 and all(b < a for a, b in zip(val, val[1:], strict=False)), val
    assert val[-1] < 0.7 * val[0]  # it learns: the placeholders would log 0.0000 throughout
    assert re.findall(r"val loss (\d+\.\d+)", said) == [f"{v:.4f}" for v in val]
    assert said.count("saved checkpoint") == 4
    save = [s for s in prof.report().lines if "torch.save" in s.source]
    state = tiny_gpt.TinyGPT(8, 16, 32, 4, 1).state_dict()
    # each save, each storage once: the tied embedding and head are one (as on a GPU)
    storages = {
        v.untyped_storage().data_ptr(): v.untyped_storage().nbytes() for v in state.values()
    }
    assert len(storages) == len(state) - 1
    assert [(s.d2h.count, s.d2h.bytes) for s in save] == [
        (4 * len(storages), 4 * sum(storages.values()))
    ]
    assert torch.load(tmp_path / "ckpt.pt", map_location="cpu")["step"] == 30


SCRIPT = """\
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
t = torch.arange(6.0).to(device)
print(t[t > 2].sum().item(), torch.cuda.is_available())
"""


@pytest.mark.slow
def test_the_cli_computes_real_values_by_default_and_says_so(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = run_gpuwatch(["profile", "--fake-cuda", "--json", "run.json", "s.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "12.0 True\n"  # 3 + 4 + 5, as a GPU computes it
    assert "SIMULATED: --fake-cuda, 1 fake GPU, values computed on the CPU." in done.stderr
    assert "placeholders" not in done.stderr
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["options"]["fake_cuda"] == {
        "devices": 1,
        "values": "real",
        "memory_bytes": 80 * 1024**3,
        "placeholders": {"values": 0, "host_copies": 0, "sizes": 0},
    }
    # the mask's nonzero, then .item(): 2 syncs; the copy in, blocking: 1
    assert report["totals"]["syncs"]["by_cause"] == {
        "copy_to_device": 1,
        "data_dependent_shape": 1,
        "item": 1,
    }
