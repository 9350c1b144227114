"""GPU memory in the live view: what a snapshot carries (each GPU's bytes now and peak so far,
the lines holding the most now, exact bytes), how the view words it at any width, the partial
report it leaves, and a real ``--fake-cuda`` child whose memory by line shows while it runs and
whose device mismatch is explained in the view's summary as in the CLI's."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
import torch
from rich.console import Console

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.output.text import summary
from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import LiveSnapshot, report_from_snapshot
from gpuwatch.profile.live.session import ChildSession
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from gpuwatch.ui.live.memory_table import MemoryLinesTable, memory_words
from profilers.memory.section import LIVE_LINES
from tests import conftest
from tests.conftest import plain, wait_until
from tests.profiler_helpers import line_of

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)
HERE = __file__.rsplit("/", 1)[-1]
MiB = 1 << 20


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_snapshot_carries_each_gpus_bytes_and_the_top_lines_now_exact(both_values):
    from profilers.fake_cuda.harness import fake_cuda

    with (
        fake_cuda(memory_bytes=24 << 30),
        profilers.profile(kernel_timing=False, count_ops=True) as prof,
    ):
        # twelve storages of 1..12 KiB, made by one line
        held = [torch.empty(256 * (i + 1), device="cuda:0") for i in range(12)]  # @held
        big = torch.empty(4 * MiB, device="cuda:0")  # @big
        del big  # freed: 16 MiB was the peak, the line now holds nothing
        live = prof.live_snapshot()["memory"]
    kib = sum(1024 * (i + 1) for i in range(12))  # 78 KiB in all: 1 + 2 + ... + 12
    assert live["tracked"] is True and live["failure"] is None
    assert live["devices"] == [
        {
            "device": "cuda:0",
            "live_bytes": kib,
            "peak_bytes": kib + 16 * MiB,
            "capacity_bytes": 24 << 30,
        }
    ]
    # one line of code, twelve storages: one line holding all 78 KiB
    assert [(r["line"], r["live_bytes"], r["max_bytes"]) for r in live["lines"]] == [
        (line_of("held"), kib, kib)
    ]
    assert live["line_count"] == 1 and len(held) == 12


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_only_the_top_lines_travel(both_values):
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(), profilers.profile(kernel_timing=False, count_ops=True) as prof:
        kept: list[torch.Tensor] = []
        for n in range(1, 13):  # twelve lines: code of twelve files, each holding n KiB
            code = compile(
                f"kept.append(torch.empty({256 * n}, device='cuda:0'))", f"gen{n}.py", "exec"
            )
            exec(code, {"kept": kept, "torch": torch})
        live = prof.live_snapshot()["memory"]
    assert live["line_count"] == 12 and len(live["lines"]) == LIVE_LINES == 10
    # largest first: 12 KiB, 11 KiB, ... 3 KiB (the two smallest stay in the child)
    assert [r["live_bytes"] for r in live["lines"]] == [1024 * n for n in range(12, 2, -1)]


def test_memory_words_fit_the_room_they_have():
    one = {
        "tracked": True,
        "source": "simulated",
        "devices": [
            {"device": "cuda:0", "live_bytes": 520 * MiB, "peak_bytes": 1224 * MiB,
             "capacity_bytes": 24 << 30}
        ],
    }  # fmt: skip
    assert memory_words(one, 100) == "GPU memory 520.0 MiB now, peak 1.2 GiB of 24 GiB (predicted)"
    assert memory_words(one, 50) == "GPU memory 520.0 MiB now, peak 1.2 GiB of 24 GiB"
    assert memory_words(one, 35) == "GPU 520.0 MiB now, peak 1.2 GiB"
    assert memory_words(one, 10) == "520.0 MiB, peak 1.2 GiB"  # the shortest, cut by the border
    two = {
        "tracked": True,
        "source": "measured",
        "devices": [
            {"device": f"cuda:{i}", "live_bytes": n * MiB, "peak_bytes": 2 * n * MiB}
            for i, n in enumerate((100, 300))
        ],
    }
    assert memory_words(two, 100) == (
        "GPU memory now (peak): cuda:0 100.0 MiB (200.0 MiB), cuda:1 300.0 MiB (600.0 MiB)"
    )
    assert memory_words({}, 100) == ""
    assert memory_words({"tracked": False, "failure": {}}, 100) == ""


FAILURE = {
    "kind": "device_mismatch",
    "error": "RuntimeError: Expected all tensors to be on the same device, but found at least "
    "two devices, cuda:0 and cpu!",
    "op": "mul.Tensor",
    "file": "model.py",
    "line": 13,
    "function": "forward",
    "source": "return h * mask",
    "chain": ["train.py:20 main"],
    "tensors": [],
    "fixes": ["made on the CPU by torch.zeros at model.py:12: pass device=x.device (here cuda:0)"],
}


def test_a_child_that_dies_leaves_its_failure_and_gpu_memory_in_the_partial_report():
    memory = {
        "tracked": True,
        "source": "simulated",
        "devices": [{"device": "cuda:0", "live_bytes": 4096, "peak_bytes": 8192,
                     "capacity_bytes": 1 << 30}],
        "lines": [{"file": "model.py", "line": 9, "function": "f", "source": "",
                   "live_bytes": 4096, "max_bytes": 4096}],
        "line_count": 1,
        "failure": FAILURE,
    }  # fmt: skip
    snap = LiveSnapshot(1.0, report_from_snapshot(None, [], 0, "").totals.counters_dict(),
                        [], [], 0, 0, "every_op", memory=memory)  # fmt: skip
    report = report_from_snapshot(snap, ["model.py"], 137, "killed by SIGKILL")
    assert report.memory is not None
    assert report.memory["failure"] == FAILURE
    assert report.memory["devices"] == [memory["devices"][0]]  # type: ignore[index]
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(summary(report, analyze(report)))
    text = out.getvalue()
    assert "DEVICE MISMATCH at model.py:13 (return h * mask): mul.Tensor" in text
    assert "fix: made on the CPU by torch.zeros at model.py:12" in text


SCRIPT = textwrap.dedent(
    """\
    import os, time, torch

    weights = torch.zeros(1024, 4, device="cuda:0")
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists("go") and time.monotonic() < deadline:
        time.sleep(0.02)
    mask = torch.ones(4)
    weights * mask
    """
)


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
async def test_a_fake_cuda_child_shows_memory_by_line_then_its_mismatch_explained(tmp_path: Path):
    (tmp_path / "train.py").write_text(SCRIPT)
    session = ChildSession(
        Target(str(tmp_path / "train.py"), []),
        ProfileOptions(fake_cuda=True),
        interval_s=0.05,
        cwd=str(tmp_path),
    )
    run = LiveRun(session, [Output("json", str(tmp_path / "run.json"))], "off")
    app = LiveApp(run, None, no_gpu_reason="test")
    async with app.run_test(size=(120, 40)) as pilot:
        # 1024 x 4 floats = 16,384 bytes, held by line 3 while the script waits
        def held() -> bool:
            snap = run.last_snapshot
            return snap is not None and any(
                (r["line"], r["live_bytes"]) == (3, 16384) for r in snap.memory.get("lines", [])
            )

        await wait_until(held, 60)
        await pilot.press("m")
        table = app.query_one(MemoryLinesTable)
        await wait_until(lambda: table.display and table.row_count == 1, 10)
        assert table.get_row_at(0)[0].plain == "train.py:3"
        assert table.get_row_at(0)[1].plain == "16.0 KiB"
        assert table.border_subtitle.startswith("GPU memory 16.0 KiB now, peak 16.0 KiB of")
        (tmp_path / "go").write_text("")
        await wait_until(lambda: app.ended is not None, 60)
        await pilot.pause()
        text = plain(app.screen.query_one("#summary"))
    # as the CLI's summary says it (gpuwatch/output/memory.py failure_lines)
    assert "DEVICE MISMATCH at train.py:9 (weights * mask): mul.Tensor" in text
    assert "fix: made on the CPU by torch.ones at train.py:8: pass device=x.device" in text
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["memory"]["failure"]["line"] == 9
