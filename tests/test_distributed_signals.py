"""SIGTERM to ``gpuwatch profile --nproc-per-node N`` (what SLURM and Kubernetes send at a time
limit), with the real launcher (torch.distributed.run) and gloo: the signal reaches the ranks,
a rank that cannot stop is killed after a bounded wait, the partial reports are merged, and
nothing is left running or on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import default_signals

pytestmark = pytest.mark.slow

# Both ranks all-reduce once (40 bytes each); then rank 1 hangs where no signal reaches it (as in
# a wedged driver call: the stopping signals blocked), while rank 0 copies 64 bytes to a (fake)
# GPU every 20 ms.
SCRIPT = """\
import os, signal, time, torch, torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

dist.init_process_group("gloo")
t = torch.ones(10)
dist.all_reduce(t)
if dist.get_rank() == 1:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
    open("hung", "w").close()
    time.sleep(3600)
with FakeTensorMode(shape_env=ShapeEnv()):
    for i in range(10**9):
        torch.randn(16).to("cuda:0")
        if i == 3:
            open("running", "w").close()
        time.sleep(0.02)
"""


def test_sigterm_stops_the_ranks_merges_their_partial_reports_and_leaves_nothing(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    env["GPUWATCH_RANK_GRACE_S"] = "3"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "profile", "-q", "--nproc-per-node", "2",
         "--checkpoint", "0", "--json", "merged.json", "train.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "running").exists() and (tmp_path / "hung").exists()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) >= 3  # the launcher and two ranks
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
    assert [p.name for p in (tmp_path / "tmp").glob("gpuwatch-*")] == []  # the ranks' folder
    doc = json.loads((tmp_path / "merged.json").read_text())
    # rank 0 stopped by the forwarded SIGTERM and wrote its partial report; rank 1 was hung,
    # killed after the grace period, and is said to be missing
    assert doc["ranks"] == [0] and doc["missing_ranks"] == [1] and doc["world_size"] == 2
    assert doc["partial"] is True
    assert "stopped by SIGTERM" in doc["error"] and "no report from rank 1" in doc["error"]
    assert doc["totals"]["comm"]["by_op"]["all_reduce"] == {"count": 1, "bytes": 40}
    h2d = doc["totals"]["h2d"]
    assert h2d["count"] >= 4 and h2d["bytes"] == 64 * h2d["count"]
