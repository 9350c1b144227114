"""The counts are the same on every torch release gpuwatch supports: the demos' copies, bytes,
syncs by cause and collectives, line by line, equal what torch 2.13 gave (tests/data/
release_counts.json), on both counting paths, under --fake-cuda. CI runs this on the oldest, the
lent GPU machine's and the newest release too (.ci/torch_matrix.sh).

To record the expected counts again (on torch 2.13 only):
``GPUWATCH_RECORD_COUNTS=1 python -m pytest tests/test_release_counts.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import conftest
from tests.helpers import gpuwatch_here

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = ROOT / "tests" / "data" / "release_counts.json"
TINY = ["--steps", "4", "--epochs", "2", "--batch", "8", "--size", "16"]

#: Each workload: gpuwatch's options, a demo and its arguments (tiny sizes: the counts, not the
#: speed, are compared).
WORKLOADS: dict[str, list[str]] = {
    "walkthrough": ["demos/fake_gpu_walkthrough.py", "--steps", "6", "--batch", "32"],
    "training_naive": ["demos/single_gpu_training.py", "--variant", "naive", *TINY],
    "training_fixed": ["demos/single_gpu_training.py", "--variant", "fixed", *TINY],
    "tiny_gpt": (
        "demos/tiny_gpt.py --steps 6 --eval-every 3 --eval-iters 2 --batch 4 --block 8 "
        "--width 16 --layers 1 --quiet"
    ).split(),
    "trace_log": "demos/exercises.py trace-log --steps 5 --size 8".split(),
    "two_gpus": "--fake-gpus 2 demos/exercises.py two-gpus --steps 2 --size 8".split(),
}
PATHS = {"fast": ["--no-kernel-timing"], "mode": []}

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
]


def _copies(c: dict[str, Any]) -> list[int]:
    return [c["count"], c["bytes"], c["pageable"], c["non_blocking"]]


def counts(doc: dict[str, Any]) -> dict[str, Any]:
    """What must not change between releases: per line and in all, the copies by direction
    (count, bytes, pageable, non_blocking), the syncs by cause and the collectives. NB: op
    totals may differ (torch 2.9 dispatches one more ``detach`` per gradient accumulated:
    tests/profiler_helpers.py, EXTRA_DETACHES), so they are not compared."""

    def of(entry: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {d: _copies(entry[d]) for d in ("h2d", "d2h", "d2d", "p2p")}
        out["syncs"] = dict(sorted(entry["syncs"]["by_cause"].items()))
        out["comm"] = [entry["comm"]["count"], entry["comm"]["bytes"]]
        return out

    def counted(entry: dict[str, Any]) -> bool:  # NB: a line of ops alone is an op total
        return any(v != [0, 0, 0, 0] for k, v in entry.items() if k not in ("syncs", "comm")) or (
            bool(entry["syncs"]) or entry["comm"] != [0, 0]
        )

    lines = {f"{s['file']}:{s['line']}": of(s) for s in doc["sites"]}
    lines = {where: entry for where, entry in lines.items() if counted(entry)}
    return {"totals": of(doc["totals"]), "lines": dict(sorted(lines.items()))}


def _profiled(tmp_path: Path, name: str, path: str) -> dict[str, Any]:
    out = tmp_path / f"{name}-{path}.json"
    args = ["profile", "-q", "--fake-cuda", *PATHS[path], "--json", str(out), *WORKLOADS[name]]
    done = gpuwatch_here(args, ROOT)
    assert done.returncode == 0, done.stderr
    return counts(json.loads(out.read_text()))


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_demos_counts_line_by_line_equal_torch_2_13s(tmp_path, name, path):
    got = _profiled(tmp_path, name, path)
    if os.environ.get("GPUWATCH_RECORD_COUNTS"):
        assert torch.__version__.startswith("2.13."), "record the expected counts on torch 2.13"
        recorded = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
        recorded[f"{name}/{path}"] = got
        EXPECTED.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
    expected = json.loads(EXPECTED.read_text())[f"{name}/{path}"]
    assert got["totals"] == expected["totals"]
    assert got["lines"] == expected["lines"]


def test_the_counts_compared_are_not_empty():
    """The comparison above would pass on runs that counted nothing: the recorded demos make
    copies and syncs of every cause the walkthrough teaches, at the lines that make them."""
    recorded = json.loads(EXPECTED.read_text())
    assert set(recorded) == {f"{n}/{p}" for n in WORKLOADS for p in PATHS}
    walk = recorded["walkthrough/fast"]
    # 6 steps: a blocking label copy, a scale tensor made on the host, a loss .item() and an
    # accuracy .cpu() each step
    assert walk["totals"]["syncs"]["item"] == 6
    assert walk["totals"]["syncs"]["copy_to_host"] == 6
    assert walk["lines"]["demos/fake_gpu_walkthrough.py:41"]["h2d"][0] == 6
    for name in WORKLOADS:
        fast, mode = recorded[f"{name}/fast"], recorded[f"{name}/mode"]
        assert fast["lines"] and fast == mode, f"{name}: the two counting paths disagree"
