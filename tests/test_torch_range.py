"""The torch range gpuwatch declares is the one it tests, and a torch outside it is said in one
line, with what is lost there."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import torch

from gpuwatch.profile import torch_range
from profilers import torch_private as private

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_declares_exactly_the_tested_range_and_this_torch_is_its_oldest_end():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"torch\b", d)]
    oldest, newest = min(torch_range.TESTED), max(torch_range.TESTED)
    assert spec == f"torch>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}"
    # NB: the suite runs on the range's oldest end (here its only release): the private-hook
    # test beside this one checks that everything resolves on it.
    assert torch_range.release(torch.__version__) == oldest
    assert torch_range.check_installed() is None


def test_an_untested_torch_is_one_line_saying_what_is_lost():
    lost = private.WHAT_EACH_GIVES
    line = torch_range.untested_line(
        "2.5.1+cu121",
        ["torch._C._current_autograd_node", "torch._C._get_sequence_nr_x", "torch.cuda._gpu_trace"],
        {**lost, "torch._C._get_sequence_nr_x": lost["torch._C._current_autograd_node"]},
    )
    assert line == (
        "gpuwatch: warning: torch 2.5.1+cu121 is untested (gpuwatch is tested on torch 2.13.x); "
        "lost on it: --trace-syncs; backward ops charged to their forward line"
    )
    assert torch_range.untested_line("2.14.0", [], lost) == (
        "gpuwatch: warning: torch 2.14.0 is untested (gpuwatch is tested on torch 2.13.x); "
        "every private hook it uses resolves, but counts are not checked on it"
    )
    assert torch_range.untested_line("2.13.1", ["torch.cuda._gpu_trace"], lost) is None
    assert torch_range.release("nightly") is None
