"""``%load_ext gpuwatch`` and ``%%gpuwatch`` in a real Jupyter kernel (nbclient runs the
notebook), and a report shown as the last expression of a cell."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (pip install -e '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="needs nbclient (pip install -e '.[test]')")

PLOTLY = "application/vnd.plotly.v1+json"


def _run(tmp_path, *sources, allow_errors=False):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ("%load_ext gpuwatch", *sources)]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=allow_errors
    )
    client.execute(cwd=str(tmp_path))
    return nb, [c.outputs for c in nb.cells[1:]]


def _shown(outputs):
    """The report's own output (tables and text) and its charts."""
    (report,) = [o for o in outputs if "text/html" in o.get("data", {})]
    charts = [o for o in outputs if PLOTLY in o.get("data", {})]
    return report, charts


def test_profiled_cells_show_small_reports_with_options_honoured(tmp_path):
    nb, (magic, last, line, timed, error) = _run(
        tmp_path,
        "%%gpuwatch --json nb.json\nimport torch\nfor _ in range(3):\n"
        "    x = torch.ones(3) + 1  # the cell's line\nx.sum()",
        "import profilers, torch\nwith profilers.profile() as p:\n    torch.ones(2) * 2\np.report()",
        "%gpuwatch torch.zeros(4).sum()",
        "%%gpuwatch --no-kernel-timing --json untimed.json\ntorch.ones(2).sum()",
        "%%gpuwatch --jsn x.json\ntorch.ones(1)",
        allow_errors=True,
    )
    report, charts = _shown(magic)
    page, text = report.data["text/html"], report.data["text/plain"]
    assert page.startswith("<div class=gpuwatch-report>") and "<script" not in page
    assert ".gpuwatch-report table{" in page and "body{" not in page  # styles only itself
    assert "x = torch.ones(3) + 1  # the cell&#x27;s line" in page
    assert "gpuwatch profile %%gpuwatch --json nb.json" in text and "ops: 7" in text  # 3+3+1
    assert [c.data[PLOTLY]["layout"]["title"]["text"] for c in charts] == [
        "Kernel time per line, each op once (host timing); the .backward() line holds the whole backward"
    ]
    doc = json.loads((tmp_path / "nb.json").read_text())
    assert doc["command"] == ["%%gpuwatch", "--json", "nb.json"] and doc["totals"]["ops"] == 7
    assert not doc["partial"] and doc["error"] is None
    assert "ops: 2" in _shown(last)[0].data["text/plain"]
    assert "gpuwatch profile %gpuwatch" in _shown(line)[0].data["text/plain"]
    untimed = json.loads((tmp_path / "untimed.json").read_text())
    assert (
        untimed["options"]["kernel_timing"] is False
        and "ops: not counted" in (_shown(timed)[0].data["text/plain"])
    )
    (usage,) = error  # IPython's one line for a magic's usage error; the cell did not run
    assert usage.text == "UsageError: %%gpuwatch: unrecognized arguments: --jsn x.json\n"
    assert not (tmp_path / "x.json").exists()
    # NB: the whole notebook, as saved: plotly.js (4.8 MB) was embedded in every report.
    assert len(nbformat.writes(nb)) < 200_000


def test_a_cell_that_raises_fails_as_without_the_magic_and_its_report_says_so(tmp_path):
    nb, (raised, after) = _run_expecting_error(tmp_path)
    (err,) = [o for o in raised if o.output_type == "error"]
    assert err.ename == "ZeroDivisionError" and err.evalue == "division by zero"
    assert not any("gpuwatch/profile/notebook.py" in frame for frame in err.traceback)
    report, _ = _shown(raised)
    assert "did not finish: ZeroDivisionError: division by zero" in report.data["text/html"]
    doc = json.loads((tmp_path / "err.json").read_text())
    assert doc["partial"] is True and doc["error"] == "ZeroDivisionError: division by zero"
    assert doc["exit_code"] == 1 and doc["totals"]["ops"] == 2  # ones, sum
    assert after == []  # nbclient stopped at the failed cell, as without the magic


def _run_expecting_error(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(src)
        for src in (
            "%load_ext gpuwatch",
            "%%gpuwatch --json err.json\nimport torch\ntorch.ones(2).sum()\n1 / 0",
            "print('not reached')",
        )
    ]
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute(cwd=str(tmp_path))
    return nb, [c.outputs for c in nb.cells[1:]]


@pytest.mark.fake_cuda
def test_fake_cuda_from_a_notebook_then_an_interrupted_cell_is_reported(tmp_path):
    import asyncio
    import threading
    import time

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(src)
        for src in (
            "%load_ext gpuwatch",
            "%%gpuwatch --fake-cuda --json fake.json\nimport torch\n"
            "x = torch.ones(4).to('cuda')\ny = (x * 2).sum().item()",
            "import torch\ntorch.cuda.is_available()",  # the fake GPU ended with its cell
            "%%gpuwatch --json int.json\nimport time\ntorch.ones(2).sum()\n"
            "open('sleeping', 'w').close()\ntime.sleep(60)",
        )
    ]
    # NB: a real interrupt, as Jupyter's stop button sends it: the kernel manager signals the
    # kernel (SIGINT) once the cell is in its sleep (the file says so), not after a timeout.
    # The cells get 120 s: building the fake GPU's guard takes a while on a busy machine.
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True)

    def interrupt_once_sleeping() -> None:
        deadline = time.monotonic() + 120
        while not (tmp_path / "sleeping").exists():
            if time.monotonic() > deadline:
                return  # the cell never got there: its assertions below say so
            time.sleep(0.05)
        asyncio.run(client.km.interrupt_kernel())

    interrupter = threading.Thread(target=interrupt_once_sleeping, daemon=True)
    interrupter.start()
    client.execute(cwd=str(tmp_path))
    interrupter.join(5)
    fake, after, interrupted = (c.outputs for c in nb.cells[1:])
    doc = json.loads((tmp_path / "fake.json").read_text())
    assert doc["options"]["fake_cuda"] and not doc["partial"]
    assert doc["totals"]["h2d"]["count"] == 1 and doc["totals"]["h2d"]["bytes"] == 16  # 4 x 4 B
    assert doc["totals"]["syncs"]["by_cause"] == {"copy_to_device": 1, "item": 1}
    assert "SIMULATED: --fake-cuda" in _shown(fake)[0].data["text/plain"]
    assert [o.data["text/plain"] for o in after if o.output_type == "execute_result"] == ["False"]
    (err,) = [o for o in interrupted if o.output_type == "error"]
    assert err.ename == "KeyboardInterrupt"
    doc = json.loads((tmp_path / "int.json").read_text())
    assert doc["partial"] is True and doc["error"] == "KeyboardInterrupt"
    assert doc["exit_code"] == 130 and doc["totals"]["ops"] == 2
    assert "did not finish" in _shown(interrupted)[0].data["text/html"]
