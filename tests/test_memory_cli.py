"""``gpuwatch profile --fake-cuda`` on a script that crashes: the script's own traceback as on a
GPU, then the summary naming the lines and the fix; the report written and valid. And the
options' edges (``--memory``, ``--fake-memory``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.output.load import schema
from gpuwatch.profile.sizes import memory_size
from tests import conftest
from tests.helpers import run_gpuwatch

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)

MISMATCH = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            h = self.fc(x)
            mask = torch.zeros(4)
            return h * mask


    model = Net().to("cuda:0")
    model(torch.randn(2, 8, device="cuda:0"))
    """
)


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
def test_a_device_mismatch_shows_the_scripts_traceback_then_the_lines_and_the_fix(tmp_path):
    (tmp_path / "model.py").write_text(MISMATCH)
    # NB: a real process: the traceback is printed as the process ends, as users see it
    done = run_gpuwatch(
        ["profile", "--fake-cuda", "--no-gpu-stats", "--json", "r.json", "model.py"], tmp_path
    )
    assert done.returncode == 1, done.stderr
    err = done.stderr
    traceback = err[err.index("Traceback") : err.index("gpuwatch: wrote")]
    # as on a GPU: the script's frames (and nn.Module's), ending at the line that failed
    assert traceback.rstrip().endswith(
        '  File "' + str(tmp_path / "model.py") + '", line 13, in forward\n'
        "    return h * mask\n"
        "           ~~^~~~~~\n"  # Python's own carets
        "RuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!"
    )
    assert "profilers" not in traceback and "_subclasses" not in traceback
    assert "DEVICE MISMATCH at model.py:13 (return h * mask): mul.Tensor" in err
    assert "  other: cpu (4,) float32  made by zeros at model.py:12" in err
    assert (
        "  fix: made on the CPU by torch.zeros at model.py:12: pass device=x.device "
        "(here cuda:0)" in err
    )
    report = json.loads((tmp_path / "r.json").read_text())
    __import__("jsonschema").validate(report, schema("gpuwatch.profile/1"))
    assert report["memory"]["failure"]["line"] == 13
    assert report["options"]["fake_cuda"]["memory_bytes"] == 80 * 1024**3


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
def test_out_of_memory_on_a_simulated_gpu_names_the_line_and_what_holds_the_memory(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    (tmp_path / "big.py").write_text(
        textwrap.dedent(
            """\
            import torch

            weights = torch.empty(512, 1024, device="cuda:0")
            batch = torch.empty(256, 1024, device="cuda:0")
            out = torch.empty(512, 1024, device="cuda:0")
            """
        )
    )
    argv = ["profile", "--fake-cuda", "--fake-memory", "4MiB", "--no-gpu-stats", "--json", "r.json"]
    assert cli.main([*argv, "big.py"]) == 1  # in this process: the run path of the CLI
    err = capsys.readouterr().err
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB." in err
    lines = err.splitlines()
    at = lines.index(
        "OUT OF MEMORY: would run out of memory on a 4 MiB GPU at big.py:5 "
        '(out = torch.empty(512, 1024, device="cuda:0")), asking for 2.0 MiB'
    )
    assert lines[at + 1 : at + 4] == [
        "  the lines holding its 3.0 MiB then:",
        '    big.py:3  2.0 MiB  weights = torch.empty(512, 1024, device="cuda:0")',
        '    big.py:4  1.0 MiB  batch = torch.empty(256, 1024, device="cuda:0")',
    ]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["memory"]["failure"]["held_bytes"] == 3 * 1024**2


@pytest.mark.fake_cuda
def test_fake_memory_needs_fake_cuda_and_a_size(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("")
    assert cli.main(["profile", "--fake-memory", "24GiB", "s.py"]) == 2
    assert capsys.readouterr().err == "gpuwatch: error: --fake-memory goes with --fake-cuda\n"
    with pytest.raises(SystemExit) as exited:
        cli.main(["profile", "--fake-cuda", "--fake-memory", "lots", "s.py"])
    assert exited.value.code == 2
    assert "not a memory size: 'lots' (write e.g. 24GiB, 512MiB or 80GB)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("24GiB", 24 * 1024**3), ("24G", 24 * 1024**3), ("80GB", 80 * 10**9), ("512 MiB", 2**29)],
)
def test_memory_sizes(text: str, nbytes: int) -> None:
    assert memory_size(text) == nbytes


def test_a_gpu_of_a_few_bytes_is_refused() -> None:
    with pytest.raises(Exception, match="a GPU's memory is 1MiB to 1PiB"):
        memory_size("512KiB")


def test_memory_is_an_option_of_profile(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(["profile", "--memory", "s.py"])
    assert args.memory is True


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_gpu_memory_at_end_is_what_the_script_still_held(tmp_path, monkeypatch, capsys):
    # A global the script holds when it ends is held "at end", cycle or not (no function here
    # keeps the module's globals alive): as under python, __main__ lives until the process ends.
    (tmp_path / "held.py").write_text(
        'import torch\nkeep = torch.empty(256, 1024, device="cuda:0")\n'
        'tmp = torch.empty(1024, device="cuda:0")\ndel tmp\n'
    )
    monkeypatch.chdir(tmp_path)
    argv = ["profile", "-q", "--fake-cuda", "--no-gpu-stats", "--json", "r.json", "held.py"]
    assert cli.main(argv) == 0
    lines = json.loads((tmp_path / "r.json").read_text())["memory"]["lines"]
    assert [(r["line"], r["live_bytes"]) for r in lines] == [(2, 1024**2), (3, 0)]


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_gpu_memory_at_end_is_what_a_module_still_held_when_it_called_sys_exit(
    tmp_path, monkeypatch
):
    # -m: runpy hands the module's globals back only when it returns; sys.exit() at the end
    # (the usual ``sys.exit(main())``) raises through it, and python keeps __main__ all the same.
    (tmp_path / "held.py").write_text(
        'import sys, torch\nkeep = torch.empty(256, 1024, device="cuda:0")\n'
        'tmp = torch.empty(1024, device="cuda:0")\ndel tmp\nsys.exit(0)\n'
    )
    monkeypatch.chdir(tmp_path)
    argv = ["profile", "-q", "--fake-cuda", "--no-gpu-stats", "--json", "r.json", "-m", "held"]
    assert cli.main(argv) == 0
    lines = json.loads((tmp_path / "r.json").read_text())["memory"]["lines"]
    assert [(r["line"], r["live_bytes"]) for r in lines] == [(2, 1024**2), (3, 0)]
