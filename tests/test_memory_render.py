"""The memory section as a user reads it: the summary's lines, the HTML, a saved report's round
trip (no torch needed to render it)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.output.html import render_html
from gpuwatch.output.memory import failure_lines, memory_title
from gpuwatch.output.text import summary
from profilers import Report


def line(n: int, source: str, **bytes_: int) -> dict[str, Any]:
    return {"file": "train.py", "line": n, "function": "<module>", "source": source, **bytes_}


MIB = 1024**2

MEMORY = {
    "tracked": True,
    "source": "simulated",
    "devices": [
        {
            "device": "cuda:0",
            "capacity_bytes": 24 * 1024**3,
            "peak_bytes": 96 * MIB,
            "peak_step": 2,
            "live_bytes": 64 * MIB,
        }
    ],
    "peak": {
        "device": "cuda:0",
        "bytes": 96 * MIB,
        "step": 2,
        "capacity_bytes": 24 * 1024**3,
        "lines": [line(12, "opt.step()", bytes=64 * MIB), line(4, "model.to(dev)", bytes=32 * MIB)],
    },
    "lines": [
        line(12, "opt.step()", peak_bytes=64 * MIB, live_bytes=64 * MIB, max_bytes=64 * MIB),
        line(4, "model.to(dev)", peak_bytes=32 * MIB, live_bytes=0, max_bytes=32 * MIB),
    ],
    "failure": {
        "kind": "out_of_memory",
        "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "op": "empty.memory_format",
        **line(88, "big = torch.empty(n, device=dev)"),
        "device": "cuda:0",
        "requested_bytes": 2 * 1024**3,
        "capacity_bytes": 24 * 1024**3,
        "held_bytes": 96 * MIB,
        "held": [line(12, "opt.step()", bytes=64 * MIB), line(4, "model.to(dev)", bytes=32 * MIB)],
    },
}


def report() -> Report:
    r = Report(command=["train.py"], exit_code=1, partial=True, memory=MEMORY)
    r = r.replace(error=MEMORY["failure"]["error"])
    return r


def test_an_oom_on_a_simulated_gpu_reads_as_would_run_out():
    assert failure_lines(report()) == [
        "OUT OF MEMORY: would run out of memory on a 24 GiB GPU at train.py:88 "
        "(big = torch.empty(n, device=dev)), asking for 2.0 GiB",
        "  the lines holding its 96.0 MiB then:",
        "    train.py:12  64.0 MiB  opt.step()",
        "    train.py:4  32.0 MiB  model.to(dev)",
    ]


def test_the_summary_has_the_failure_and_the_lines_by_memory():
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(summary(report(), analyze(report())))
    text = out.getvalue()
    assert "OUT OF MEMORY: would run out of memory on a 24 GiB GPU at train.py:88" in text
    rows = [s.strip() for s in text.splitlines()]
    at = rows.index(
        "GPU memory by line (predicted on the simulated GPU): peak 96.0 MiB of 24 GiB on "
        "cuda:0 in step 2"
    )
    assert rows[at + 2].split() == ["line", "at", "peak", "at", "end", "most", "source"]
    assert rows[at + 4].split() == ["train.py:12", "64.0", "MiB", "64.0", "MiB", "64.0", "MiB",
                                    "opt.step()"]  # fmt: skip
    assert rows[at + 5].split() == ["train.py:4", "32.0", "MiB", "0", "B", "32.0", "MiB",
                                    "model.to(dev)"]  # fmt: skip


def test_under_gpu_name_the_peak_is_of_that_gpus_size_not_the_fake_devices():
    r = report()  # the fake device has 24 GiB; the run was predicted for a T4 (16 GiB)
    r = r.replace(
        predicted={"gpu": "T4", "memory": {"peak_bytes": 96 << 20, "gpu_bytes": 16 << 30}}
    )
    assert memory_title(r) == (
        "GPU memory by line (predicted on the simulated GPU): peak 96.0 MiB of 16 GiB "
        "(PREDICTED for T4) on cuda:0 in step 2"
    )


def test_a_caught_failure_says_so():
    r = report()
    r = r.replace(error=None)
    r = r.replace(exit_code=0)
    r = r.replace(error="ValueError: later")
    assert failure_lines(r)[0].startswith("earlier, caught by the script: OUT OF MEMORY")


def test_a_saved_report_keeps_its_memory_and_the_page_shows_it():
    again = Report.from_dict(report().to_dict())
    assert again.memory == MEMORY
    page = render_html(again, analyze(again))
    assert "would run out of memory on a 24 GiB GPU at train.py:88" in page
    assert "<td>train.py:12</td><td>64.0 MiB</td><td>64.0 MiB</td><td>64.0 MiB</td>" in page


def test_a_report_without_memory_has_no_section():
    r = Report(command=["train.py"])
    assert "memory" not in r.to_dict()
    assert Report.from_dict(r.to_dict()).memory is None
    assert failure_lines(r) == []


def test_the_gpus_size_takes_the_article_it_is_said_with():
    from gpuwatch.output.memory import _a

    said = {
        s: _a(s) for s in ("24 GiB", "80 GiB", "8 GiB", "11 GiB", "18 GiB", "1.5 GiB", "180 GiB")
    }
    assert said == {
        "24 GiB": "a",
        "80 GiB": "an",
        "8 GiB": "an",
        "11 GiB": "an",
        "18 GiB": "an",
        "1.5 GiB": "a",
        "180 GiB": "a",
    }
