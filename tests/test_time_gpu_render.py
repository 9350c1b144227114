"""The measured GPU half in every renderer: the summary's first lines, the JSON and
its schema, the HTML's stacked bar, the trace's GPU idle track, the live status line; figures
measured on the GPU say so, and steps whose GPU half is still to come never show host bars."""

from __future__ import annotations

import io
import json

from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.output.html import render_html
from gpuwatch.output.load import problem
from gpuwatch.output.text import summary
from gpuwatch.output.timeview import step_bars
from gpuwatch.output.trace import TRACKS, render_trace
from gpuwatch.profile.live.protocol import LiveSnapshot, decode, encode
from gpuwatch.ui.widgets.status_line import status_text
from profilers import Report
from profilers.timing.verdict import last_step
from tests.test_time_gpu import ITEM, Run


def _run() -> Run:
    """Two steps of 10 ms (as tests/test_time_gpu.py's sync test): 4 ms busy, 6 ms idle, of
    which 1.9 ms is the .item()'s at train.py:9 (the GPU work it waited for) and 4.1 ms the
    host's own Python before B (launch, at train.py:12): launch-bound."""
    run = Run()
    for _ in range(2):
        run.op(8, gpu_ms=2, host_ms=0.1)
        run.op(9, gpu_ms=0, found=ITEM)
        run.python(6)
        run.op(12, gpu_ms=2)
        run.python(2)
        run.close()
    return run


def _report(run: Run) -> Report:
    r = Report(command=["train.py"], duration_s=0.02, steps={"count": 2, "source": "manual"})
    r = r.replace(time=run.section())
    return Report.from_dict(json.loads(r.to_json()))


def test_the_summary_says_the_verdict_comes_from_the_gpus_measured_time():
    out = io.StringIO()
    Console(width=200, file=out).print(summary(_report(_run()), analyze(_report(_run()))))
    text = out.getvalue()
    assert (
        "launch-bound: 10.0 ms per step over the step after the first, host work (Python + "
        "launch) 41%, GPU busy 40%, sync wait 19% of the GPU's time (measured with CUDA events)"
        in text
    )
    assert (
        "GPU measured (CUDA events): busy 4.0 ms, idle 6.0 ms per step after the first (host "
        "work (Python + launch) 4.1 ms, sync wait 1.9 ms)" in text
    )
    assert (
        "costliest line: train.py:12, 4.1 ms of GPU idle per step (41% of the step, measured "
        "with CUDA events)" in text
    )
    assert "GPU not measured" not in text and "PREDICTED" not in text


def test_the_json_holds_the_measured_gpu_half_and_fits_its_schema():
    doc = json.loads(_report(_run()).to_json())
    assert problem(doc) is None
    step = doc["time"]["steps"][1]
    assert step["gpu"]["measured"] == "measured" and step["gpu"]["busy_ms"] == 4.0
    assert step["gpu"]["idle_slices"][0]["start_ms"] == 12.0  # step 1 begins at 10 ms
    broken = json.loads(json.dumps(doc))
    broken["time"]["steps"][0]["gpu"]["measured"] = "guessed"
    assert problem(broken) is not None and "measured" in str(problem(broken))


def test_the_trace_has_a_gpu_track_of_idle_slices_named_by_cause_and_line():
    doc = json.loads(render_trace(_report(_run())))
    track = [e for e in doc["traceEvents"] if e.get("tid") == TRACKS["gpu_idle"]]
    assert track[0]["args"]["name"] == "GPU idle (measured, CUDA events)"
    assert [(e["ts"], e["dur"], e["name"]) for e in track[1:]] == [
        (2000.0, 1900.0, "sync wait (item) train.py:9"),
        (3900.0, 4100.0, "host work (Python + launch) train.py:12"),
        (12000.0, 1900.0, "sync wait (item) train.py:9"),
        (13900.0, 4100.0, "host work (Python + launch) train.py:12"),
    ]


def test_the_html_stacks_busy_and_idle_by_cause_per_step():
    r = _report(_run())
    assert step_bars(r) == [
        {
            "step": k,
            "verdict": "launch-bound",
            "ms": {"busy": 4.0, "input": 0.0, "sync": 1.9, "copy": 0.0, "comm": 0.0, "launch": 4.1},
        }
        for k in (0, 1)
    ]
    page = render_html(r, analyze(r))
    assert "GPU busy and idle by cause, measured with CUDA events" in page


def test_a_step_still_to_come_gets_no_host_bar_among_the_gpu_ones():
    run = _run()
    run.op(8, gpu_ms=50, host_ms=1)
    run.close()  # step 2: its op runs on well after the step's end
    r = _report(run)
    assert r.time is not None and r.time["steps"][2]["gpu_pending"] is True
    assert [b["step"] for b in step_bars(r)] == [0, 1]


def test_the_live_line_says_measured_on_the_gpu():
    run = _run()
    run.timer.resolve()  # as live_snapshot() does before it reads the step
    snap = LiveSnapshot(
        elapsed_s=1.0,
        totals={"ops": 8},
        devices=[],
        lines=[],
        line_count=3,
        events_recorded=0,
        counting="every_op",
        time=last_step(run.clock),
    )
    text = status_text("running", 5.0, 42, decode(encode(snap)))  # type: ignore[arg-type]
    assert text.endswith(
        "step 1 launch-bound: 10.0 ms per step, host work (Python + launch) 41%, GPU busy 40%, "
        "sync wait 19% of the GPU's time (measured with CUDA events)"
    )
