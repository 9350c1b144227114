"""gpuwatch declares a lower bound on torch only (installing it never changes the user's torch),
is tested on every release from the bound to the newest, and says in one line, after any usage
error, what it loses on a torch outside that range."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from gpuwatch.cli import main as cli
from gpuwatch.profile import torch_range
from profilers import torch_private as private

ROOT = Path(__file__).resolve().parent.parent
LOST = private.WHAT_EACH_GIVES
HIDE = "(GPUWATCH_NO_TORCH_WARNING=1 hides this line)"


def test_pyproject_declares_the_oldest_tested_release_as_a_lower_bound_only():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"torch\b", d)]
    oldest = torch_range.TESTED[0]
    # NB: no upper bound: pip would otherwise swap out a newer torch the user has for ours
    assert spec == f"torch>={oldest[0]}.{oldest[1]}"
    # the tested range has no hole: every minor release from the oldest to the newest
    majors = {major for major, _ in torch_range.TESTED}
    assert majors == {2}
    minors = [minor for _, minor in torch_range.TESTED]
    assert minors == list(range(minors[0], minors[-1] + 1))


def test_this_torch_is_tested_and_gpuwatch_says_nothing_of_it(monkeypatch):
    monkeypatch.delenv(torch_range.QUIET_VARIABLE, raising=False)
    assert torch_range.release(torch.__version__) in torch_range.TESTED
    assert torch_range.check_installed() is None


def test_a_newer_torch_is_one_line_saying_what_is_lost_and_how_to_hide_it():
    line = torch_range.untested_line(
        "2.16.0+cu130",
        ["torch._C._current_autograd_node", "torch.cuda._gpu_trace"],
        LOST,
    )
    assert line == (
        "gpuwatch: warning: torch 2.16.0+cu130 is newer than gpuwatch is tested on "
        "(torch 2.9-2.15); lost on it: --trace-syncs; backward ops charged to their forward "
        f"line {HIDE}"
    )
    assert torch_range.untested_line("2.16.0a0+git12ab", [], LOST) == (
        "gpuwatch: warning: torch 2.16.0a0+git12ab is newer than gpuwatch is tested on "
        "(torch 2.9-2.15); every private hook it uses resolves, but its counts are not checked "
        f"there {HIDE}"
    )
    assert "older than gpuwatch is tested on" in str(torch_range.untested_line("2.5.1", [], LOST))
    assert "is not a numbered release" in str(torch_range.untested_line("nightly", [], LOST))


def test_a_tested_torch_says_only_what_it_loses():
    assert torch_range.untested_line("2.13.1", [], LOST) is None
    assert torch_range.untested_line("2.9.1", ["torch.cuda._gpu_trace"], LOST) == (
        f"gpuwatch: warning: on torch 2.9.1 gpuwatch loses: --trace-syncs {HIDE}"
    )


def test_an_older_spelling_that_stands_in_is_no_loss(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.16.0")
    monkeypatch.setattr(private, "unresolved", lambda: set(private.STANDS_IN))
    assert torch_range.check_installed() == (
        "gpuwatch: warning: torch 2.16.0 is newer than gpuwatch is tested on (torch 2.9-2.15); "
        f"every private hook it uses resolves, but its counts are not checked there {HIDE}"
    )


def test_the_user_can_hide_the_line(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.16.0")
    monkeypatch.setattr(private, "unresolved", lambda: {"torch.cuda._gpu_trace"})
    monkeypatch.delenv(torch_range.QUIET_VARIABLE, raising=False)
    assert "lost on it: --trace-syncs" in str(torch_range.check_installed())
    monkeypatch.setenv(torch_range.QUIET_VARIABLE, "1")
    assert torch_range.check_installed() is None
    monkeypatch.setenv(torch_range.QUIET_VARIABLE, "0")
    assert torch_range.check_installed() is not None


@pytest.mark.fake_cuda
def test_a_usage_error_on_an_untested_torch_stays_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch, "__version__", "2.16.0")
    monkeypatch.setattr(private, "unresolved", lambda: set())
    monkeypatch.delenv(torch_range.QUIET_VARIABLE, raising=False)
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    assert cli.main(["profile", "--fake-gpus", "2", str(script)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpuwatch: error: --fake-gpus goes with --fake-cuda"]


def test_a_torch_the_profiler_cannot_load_on_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    # NB: None in sys.modules makes the import fail as a torch that moved a name would
    monkeypatch.setitem(sys.modules, "gpuwatch.profile.run", None)
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    assert cli.main(["profile", "-q", str(script)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"gpuwatch: error: the profiler cannot load on torch {torch.__version__} (gpuwatch is "
        "tested on torch 2.9-2.15): ModuleNotFoundError: "
    )


@pytest.mark.fake_cuda
@pytest.mark.parametrize(
    ("header", "standard"),
    [
        ("#if !defined(_MSC_VER) && __cplusplus < 201703L\n#error C++17\n#endif\n", "c++17"),
        (
            "#if (defined(_MSVC_LANG) && _MSVC_LANG < 202002L) || \\\n"
            "    (!defined(_MSVC_LANG) && __cplusplus < 202002L)\n#error C++20\n#endif\n",
            "c++20",
        ),
        (None, "c++17"),
    ],
)
def test_the_fake_gpus_guard_builds_with_the_standard_torchs_headers_ask_for(
    tmp_path, header, standard
):
    from profilers.fake_cuda.build import cxx_standard

    all_h = tmp_path / "torch" / "csrc" / "api" / "include" / "torch" / "all.h"
    if header is not None:
        all_h.parent.mkdir(parents=True)
        all_h.write_text(header)
    assert cxx_standard(tmp_path) == standard


@pytest.mark.fake_cuda
def test_the_installed_torchs_headers_name_a_standard_the_guard_builds_with():
    from profilers.fake_cuda.build import cxx_standard

    include = Path(torch.__file__).parent / "include"
    # NB: torch 2.9-2.13 ask for C++17, 2.14 on for C++20 (their torch/all.h)
    expected = "c++20" if torch_range.release(torch.__version__) >= (2, 14) else "c++17"  # type: ignore[operator]
    assert cxx_standard(include) == expected
