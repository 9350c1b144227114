"""The observer effect: what gpuwatch says a step and its causes took, against what the same
script measures of itself when run plainly (``tests/programs/self_timed.py``). Measured runs:
slow, and ``alone`` (beside another worker they measure it too)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import run, run_gpuwatch

SELF_TIMED = Path(__file__).parent / "programs" / "self_timed.py"


def _plain_and_profiled(kind: str, steps: int, tmp_path: Path) -> tuple[dict, dict]:
    own = tmp_path / "own.json"
    done = run(
        [sys.executable, str(SELF_TIMED), kind, str(steps)],
        tmp_path,
        env={"SELF_TIMED_OUT": str(own)},
    )
    assert done.returncode == 0, done.stderr
    plain = json.loads(own.read_text())
    report = tmp_path / "r.json"
    done = run_gpuwatch(
        ["profile", "-q", "--json", str(report), str(SELF_TIMED), kind, str(steps)],
        tmp_path,
        SELF_TIMED_OUT=str(own),
    )
    assert done.returncode == 0, done.stderr
    time = json.loads(report.read_text())["time"]
    after = time["after_first"]
    n = after["steps"]
    return plain, {
        "step_ms": after["wall_unprofiled_ms"] / n,
        "input_ms": after["host_ms"]["input"] / n,
        "input_pct": after["shares_pct"]["input"],
    }


@pytest.mark.slow
@pytest.mark.alone
def test_a_loaders_wait_is_its_own_not_the_profilers_on_its_collation(tmp_path):
    # NB: each batch is 128 row selects and 2 stacks through the mode (~5 us each of the
    # profiler's own) and a 2 ms sleep: before the profiler's time on those ops was kept
    # out of the wait, the wait read 2.2 + 0.8 ms (+35%); tolerance 15%, the is 20%.
    plain, gw = _plain_and_profiled("sleepy", 150, tmp_path)
    assert plain["input_ms"] > 2.0
    assert gw["input_ms"] == pytest.approx(plain["input_ms"], rel=0.15), (plain, gw)
