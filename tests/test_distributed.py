"""Multi-rank runs with the real thing: PyTorch's launcher (torch.distributed.run) and the gloo
backend on the CPU. Collectives per line with exact bytes, per-rank files, a crashed rank's partial
report, the merge, and ``--nproc-per-node``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.cli.main import main as gpuwatch_main
from tests import helpers

PARAM_BYTES = 64 * 64 * 4 + 64 * 4  # Linear(64, 64): weight and bias, float32 = 16640

TRAIN = """\
import torch, torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))  # @ddp
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 64)).square().mean()
    opt.zero_grad()
    loss.backward()  # @backward
    opt.step()
t = torch.ones(1000)
dist.all_reduce(t)  # @all_reduce
dist.all_gather([torch.empty(1000) for _ in range(2)], t)  # @all_gather
dist.broadcast(t, 0)  # @broadcast
work = dist.all_reduce(t, async_op=True)
work.wait()  # @wait
dist.barrier()  # @barrier

from torch.distributed.fsdp import fully_shard

sharded = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
for layer in sharded:
    fully_shard(layer)
fully_shard(sharded)
for step in range(2):
    out = sharded(torch.randn(8, 64)).sum()  # @fsdp_forward
    out.backward()  # @fsdp_backward
dist.destroy_process_group()
"""

CRASH = """\
import torch, torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(10)
dist.all_reduce(t)  # @all_reduce
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 gives up")
dist.destroy_process_group()
"""


def line_in(text: str, marker: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if s.endswith(f"# @{marker}"))


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return helpers.run(args, cwd, env={"COLUMNS": "200", "OMP_NUM_THREADS": "1"})


# NB: "--no-kernel-timing" is the fast path (only the ops that copy, sync or communicate reach
# Python): the collectives of DDP, torch.distributed and FSDP2 must count the same there.
@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--no-kernel-timing"]], ids=["every_op", "fast_path"])
def test_nproc_per_node_launches_ranks_and_merges_their_collectives_per_line(tmp_path, flags):
    (tmp_path / "train.py").write_text(TRAIN)
    done = run(
        [sys.executable, "-m", "gpuwatch", "profile", "--nproc-per-node", "2", *flags,
         "--json", "merged.json", "--html", "merged.html", "train.py"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "merged.json").read_text())
    assert doc["ranks"] == [0, 1] and doc["world_size"] == 2 and "missing_ranks" not in doc
    lines = {s["line"]: s for s in doc["sites"] if s["file"] == "train.py"}

    def comm(marker):
        return lines[line_in(TRAIN, marker)]["comm"]

    # DDP's gradient all-reduce goes to the .backward() line: 3 steps x 2 ranks x the params
    backward = comm("backward")
    assert backward["by_op"] == {"all_reduce": {"count": 6, "bytes": 6 * PARAM_BYTES}}
    # its start-up broadcast of the module state to the DDP(...) line
    assert comm("ddp")["by_op"]["broadcast"]["bytes"] >= 2 * PARAM_BYTES
    assert comm("all_reduce")["by_op"] == {"all_reduce": {"count": 2, "bytes": 8000}}
    assert comm("all_gather")["by_op"] == {"all_gather": {"count": 2, "bytes": 8000}}
    assert comm("broadcast")["by_op"] == {"broadcast": {"count": 2, "bytes": 8000}}
    assert comm("barrier")["by_op"] == {"barrier": {"count": 2, "bytes": 0}}
    assert comm("wait")["count"] == 0 and comm("wait")["wait_ms"] >= 0
    # FSDP2 (fully_shard) on gloo: each layer gathered for forward (to the forward line) and
    # again for backward, its gradients reduce-scattered (to the .backward() line); a shard is
    # half a layer's parameters, a reduce-scatter's input the whole gradient
    shard = PARAM_BYTES // 2
    assert comm("fsdp_forward")["by_op"] == {"all_gather": {"count": 8, "bytes": 8 * shard}}
    assert comm("fsdp_backward")["by_op"] == {
        "all_gather": {"count": 8, "bytes": 8 * shard},
        "reduce_scatter": {"count": 8, "bytes": 8 * PARAM_BYTES},
    }
    # each rank's own figures per line
    per_rank = lines[line_in(TRAIN, "backward")]["by_rank"]
    assert {r: c["comm"]["bytes"] for r, c in per_rank.items()} == {
        "0": 3 * PARAM_BYTES,
        "1": 3 * PARAM_BYTES,
    }
    assert doc["totals"]["comm"]["count"] == sum(s["comm"]["count"] for s in doc["sites"])
    assert "ranks 0, 1 of 2 merged" in done.stderr
    assert "Collectives:" in done.stderr and "the slowest rank per line" in done.stderr
    assert "<h2>Collectives</h2>" in (tmp_path / "merged.html").read_text()


@pytest.mark.slow
def test_torchrun_ranks_write_their_own_files_and_a_crashed_rank_still_reports(tmp_path, capsys):
    (tmp_path / "crash.py").write_text(CRASH)
    done = run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "gpuwatch", "profile", "--json", "r.json", "--checkpoint", "0", "crash.py"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "rank 1 gives up" in done.stderr  # the script's own traceback
    assert "each rank writes its own reports (r.rank1.json)" in done.stderr
    assert not (tmp_path / "r.json").exists()
    r0 = json.loads((tmp_path / "r.rank0.json").read_text())
    r1 = json.loads((tmp_path / "r.rank1.json").read_text())
    assert (r0["rank"], r0["world_size"], r1["rank"], r1["world_size"]) == (0, 2, 1, 2)
    assert r1["partial"] and "rank 1 gives up" in r1["error"] and r1["exit_code"] == 1
    for r in (r0, r1):
        assert r["totals"]["comm"]["by_op"]["all_reduce"] == {"count": 1, "bytes": 40}

    # the merge, as the user runs it; and with a rank's report missing
    code = gpuwatch_main(["report", "r.rank0.json", "r.rank1.json", "--json", "m.json"])
    merged = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and merged["ranks"] == [0, 1] and merged["partial"]
    assert merged["totals"]["comm"]["by_op"]["all_reduce"] == {"count": 2, "bytes": 80}
    assert "rank 1: RuntimeError: rank 1 gives up" in merged["error"]
    capsys.readouterr()
    assert gpuwatch_main(["report", "r.rank0.json", str(tmp_path / "r.rank0.json")]) == 2
    assert "two reports of rank 0: give each rank's report once" in capsys.readouterr().err
    assert gpuwatch_main(["report", "r.rank0.json", "--json", "alone.json"]) == 0
    alone = json.loads((tmp_path / "alone.json").read_text())
    assert alone["rank"] == 0 and "ranks" not in alone  # one rank's report stays one
    from profilers import Report
    from profilers.merge import merge_ranks

    lone = merge_ranks([Report.load(tmp_path / "r.rank0.json")])
    assert lone.missing_ranks == [1] and lone.partial and "no report from rank 1" in lone.error


SYNCS = """\
import time, torch, torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
w = torch.nn.Parameter(torch.ones(4, device="cuda:0"))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(4):
    loss = w.sum() * (rank + 1)
    a = loss.item()  # @item1
    b = w.mean().item()  # @item2
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
if rank == 1:
    time.sleep(1)  # rank 1 ends last: the summary of all is not rank 0's to print
"""


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.skipif(
    not __import__("torch").distributed.is_available(), reason="torch built without distributed"
)
def test_torchrun_with_no_output_asked_keeps_every_rank_and_counts_per_rank(tmp_path):
    (tmp_path / "syncs.py").write_text(SYNCS)
    done = run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "gpuwatch", "profile", "--fake-cuda", "syncs.py"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # each rank's report in a new folder of its own; the user's files untouched
    (folder,) = [p for p in tmp_path.iterdir() if p.name != "syncs.py"]
    assert folder.name.startswith("gpuwatch-torchrun-")
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json", "rank1.json"]
    r1 = json.loads((folder / "rank1.json").read_text())
    assert (r1["rank"], r1["world_size"], r1["totals"]["syncs"]["count"]) == (1, 2, 8)
    assert f"{folder.name}/rank1.json" in done.stderr
    # one summary, of both ranks (the last to end prints it), per step per rank
    assert done.stderr.count("gpuwatch profile syncs.py") == 1
    assert "ranks 0, 1 of 2 merged: counts are all ranks' together, per-step figures per rank" in (
        done.stderr
    )
    per_step = next(s for s in done.stderr.splitlines() if "4 steps (optimizer)" in s)
    assert "per step per rank:" in per_step and "2 syncs (2-2 across 2 ranks)" in per_step
    assert "Syncs: 16 (the host waited for a GPU)" in done.stderr  # both ranks' together
    assert "1 sync and 1 copy per step per rank" in done.stderr  # the hints' evidence


def test_a_rank_never_writes_into_an_earlier_runs_folder(tmp_path, monkeypatch):
    from gpuwatch.profile.ranks import run_folder

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    first = run_folder(0)
    assert first is not None and first.startswith("gpuwatch-torchrun-")
    (tmp_path / first / "rank0.json").write_text("the earlier run's")
    again = run_folder(0)
    assert again == f"{first}-2" and run_folder(1) == first  # rank 1 has no file there yet
    assert (tmp_path / first / "rank0.json").read_text() == "the earlier run's"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("torch").cuda.is_available() or __import__("torch").cuda.device_count() < 2,
    reason="needs two CUDA GPUs (NCCL runs one rank per GPU)",
)
def test_ddp_demo_on_nccl_all_reduces_the_gradients_from_the_backward_line(tmp_path):
    root = Path(__file__).resolve().parent.parent
    done = run(
        [sys.executable, "-m", "gpuwatch", "profile", "-q", "--nproc-per-node", "2",
         "--json", str(tmp_path / "ddp.json"), "demos/ddp_training.py", "--steps", "5"],
        root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "ddp.json").read_text())
    backward = next(s for s in doc["sites"] if s["source"].startswith("loss.backward()"))
    assert backward["comm"]["by_op"]["all_reduce"]["count"] >= 2 * 5
    assert {"0", "1"} == set(backward["by_rank"])
