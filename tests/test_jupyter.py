"""``%load_ext gpuwatch`` and ``%%gpuwatch`` in a real Jupyter kernel (nbclient runs the
notebook), and a report shown as the last expression of a cell."""

from __future__ import annotations

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (pip install -e '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="needs nbclient (pip install -e '.[test]')")


def test_a_profiled_cell_shows_its_report_inline(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext gpuwatch"),
        nbformat.v4.new_code_cell(
            "%%gpuwatch\nimport torch\nfor _ in range(3):\n    torch.ones(3) + 1  # the cell's line"
        ),
        nbformat.v4.new_code_cell(
            "import profilers, torch\nwith profilers.profile() as p:\n    torch.ones(2) * 2\n"
            "p.report()"
        ),
        nbformat.v4.new_code_cell("%gpuwatch torch.zeros(4).sum()"),
    ]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    magic, last, line = (c.outputs for c in nb.cells[1:])
    (shown,) = [o for o in magic if o.output_type == "execute_result"]
    page, text = shown.data["text/html"], shown.data["text/plain"]
    assert (
        page.lower().startswith("<!doctype html>")
        and "<h1>gpuwatch profile <code>%%gpuwatch" in page
    )
    assert "torch.ones(3) + 1  # the cell&#x27;s line" in page
    assert "gpuwatch profile %%gpuwatch" in text and "ops: 6" in text  # 3 ones, 3 adds
    (result,) = [o for o in last if o.output_type == "execute_result"]
    assert "<h1>gpuwatch profile" in result.data["text/html"]
    assert "ops: 2" in result.data["text/plain"]
    (one,) = [o for o in line if o.output_type == "execute_result"]
    assert "gpuwatch profile %gpuwatch" in one.data["text/plain"]
