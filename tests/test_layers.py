"""The import boundaries of DESIGN.md, enforced by ruff's banned-api rule (mypy --strict runs in
.ci/run). A violation (pynvml outside gpuwatch/nvml/_real.py, UI imports in profilers/) fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and not (Path(sys.executable).parent / name).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


def test_ruff_lint_and_import_boundaries():
    done = subprocess.run([*_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_banned_imports_are_really_banned(tmp_path):
    # The rule itself must bite: profilers/ importing textual is reported.
    probe = ROOT / "profilers" / "_layer_probe.py"
    probe.write_text("import textual\n")
    try:
        done = subprocess.run(
            [*_tool("ruff"), "check", "--select", "TID251", str(probe)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        probe.unlink()
    assert done.returncode == 1 and "TID251" in done.stdout


@pytest.mark.parametrize(
    ("where", "line", "banned"),
    [
        ("gpuwatch/nvml", "import torch", "torch"),
        ("gpuwatch/nvml", "from gpuwatch.app import top", "gpuwatch.app"),
        ("gpuwatch/report", "import textual", "textual"),
        ("gpuwatch/report", "import torch", "torch"),
        ("gpuwatch/report", "from gpuwatch.app.live import LiveApp", "gpuwatch.app"),
    ],
)
def test_each_layer_bans_what_sits_above_it(where, line, banned):
    probe = ROOT / where / "_layer_probe.py"
    probe.write_text(line + "\n")
    try:
        done = subprocess.run(
            [*_tool("ruff"), "check", "--select", "TID251", str(probe)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        probe.unlink()
    assert done.returncode == 1 and f"`{banned}` is banned" in done.stdout
