"""The time view in every renderer, from a report built on an injected timeline: the verdict in
the summary's first lines, hints ranked by their line's time, the trace's wait slices, the HTML's
stacked bar, the live status line."""

from __future__ import annotations

import io
import json

from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.analysis.hints import hints
from gpuwatch.output.html import render_html
from gpuwatch.output.text import summary
from gpuwatch.output.trace import render_trace
from gpuwatch.profile.live.protocol import LiveSnapshot, decode, encode
from gpuwatch.ui.widgets.status_line import status_text
from profilers import Line, LineStats, Report
from profilers.timing.timeline import SYNC, StepClock
from profilers.timing.verdict import last_step, time_section


class _Line:
    def __init__(self, line: int) -> None:
        self.file, self.line = "train.py", line


def _report() -> Report:
    """Two steps of 10 ms: line 2 runs 1 ms, line 5 waits 1 ms in .item(), then 1 ms of Python
    leads to line 9, which waits 6 ms in .cpu(), and 1 ms of Python after it ends the step."""
    item, cpu, other = _Line(5), _Line(9), _Line(2)
    clock = StepClock(start_ns=0)
    for k in range(2):
        t = k * 10_000_000
        clock.line(other).launch_ns += 1_000_000
        clock.last_ns = t + 1_000_000
        clock.wait(item, SYNC, "item", t + 1_000_000, t + 1_000_000, t + 2_000_000, t + 2_000_000)
        clock.wait(cpu, SYNC, "copy_to_host", t + 3_000_000, t + 3_000_000, t + 9_000_000,
                   t + 9_000_000)  # fmt: skip
        clock.close(t + 10_000_000)
    lines = []
    for line, cause in ((5, "item"), (9, "copy_to_host")):
        s = LineStats("train.py", line, "main")
        s.source = "loss.item()" if cause == "item" else "pred.cpu()"
        for _ in range(20):
            s.syncs.add(cause)
        s.settle()
        lines.append(Line.of(s))
    r = Report(command=["train.py"], duration_s=0.02, steps={"count": 2, "source": "manual"})
    r = r.with_lines(lines)
    r = r.replace(time=time_section(clock, 20_000_000))
    return r


def _launch_bound(blocked: int) -> Report:
    """Three steps of 10 ms: line 2's Python runs 8 ms, then ``blocked`` lines (from line 20 on)
    each wait 0.25 ms in .item() and make one pageable copy (as profilers/timing/charge.py notes
    them); steps 1 and 2 are the per-step basis, so each count is 2."""
    clock = StepClock(start_ns=0)
    for k in range(3):
        t = k * 10_000_000
        clock.line(_Line(2)).launch_ns += 8_000_000
        clock.last_ns = t + 8_000_000
        for i in range(blocked):
            at = t + 8_000_000 + i * 250_000
            rec = clock.wait(_Line(20 + i), SYNC, "item", at, at, at + 250_000, at + 250_000)
            rec.syncs += 1
            rec.host_reads += 1
            rec.pageable += 1
        clock.close(t + 10_000_000)
    r = Report(command=["train.py"], duration_s=0.03, steps={"count": 3, "source": "manual"})
    r = r.replace(time=time_section(clock, 30_000_000))
    return r


def _summary_text(r: Report) -> str:
    out = io.StringIO()
    Console(width=200, file=out, color_system=None).print(summary(r, analyze(r)))
    return out.getvalue()


def test_a_launch_bound_step_names_what_stops_a_cuda_graph_capture():
    r = _launch_bound(blocked=2)
    assert r.time is not None and r.time["after_first"]["verdict"] == "launch-bound"
    text = _summary_text(r)
    assert (
        "what stops capturing the step as a CUDA graph (one launch for its kernels), over the 2 "
        "steps after the first:" in text
    )
    for line in (20, 21):
        assert (
            f"train.py:{line}: 2 syncs (2 of them reads to the host) and 2 pageable copies" in text
        )
    html = render_html(r, analyze(r))
    assert "what stops capturing the step as a CUDA graph" in html
    assert "train.py:21: 2 syncs (2 of them reads to the host) and 2 pageable copies" in html


def test_past_five_blockers_the_summary_says_how_many_more():
    text = _summary_text(_launch_bound(blocked=7))
    assert text.count("2 syncs (2 of them reads to the host)") == 5
    assert "and 2 lines more (the JSON's graph_blockers)" in text


def test_a_step_that_is_not_launch_bound_names_no_graph_blockers():
    assert "CUDA graph" not in _summary_text(_report())  # sync-bound: 7 ms of 10 waiting


def test_the_summary_opens_with_the_verdict_and_the_costliest_line():
    out = io.StringIO()
    Console(width=200, file=out).print(summary(_report(), analyze(_report())))
    text = out.getvalue()
    # 10 ms a step: 7 ms of sync (70%), 3 ms of host work (30%).
    assert (
        "sync-bound: 10.0 ms per step over the step after the first, sync wait 70%, host work "
        "(Python + launch) 30%" in text
    )
    # Line 9: 6 ms waiting, 1 ms of Python before it and 1 ms after (its host work).
    assert (
        "costliest line: train.py:9, 8.0 ms of host time per step (80% of the step, measured)"
        in text
    )


def test_on_the_fast_path_a_lines_host_work_is_said_to_be_sampled():
    r = _report()
    assert r.time is not None
    # the fast path: host work named by the stack sampler
    r = r.replace(time=r.time.replace(lines_measured=False))
    out = io.StringIO()
    Console(width=200, file=out).print(summary(r, analyze(r)))
    assert (
        "costliest line: train.py:9, 8.0 ms of host time per step (80% of the step, measured, "
        "host work by line sampled)" in out.getvalue()
    )


def test_hints_carry_their_lines_time_and_the_costliest_comes_first():
    found = hints(_report())
    assert [h.where for h in found] == ["train.py:9", "train.py:5"]
    # each hint is charged its own cause's time at its line: line 9's 6 ms of sync wait, not
    # the 2 ms of Python around it (no fix of the sync gives those back)
    assert found[0].cost_ms == 6.0 and found[1].cost_ms == 1.0
    assert found[0].evidence.startswith(
        "it costs 6.0 ms of host time per step (60% of the step, measured); "
    )
    # Without the time view the same report ranks by counts (20 syncs each: line order kept).
    plain = _report()
    plain = plain.replace(time=None)
    assert [(h.where, h.cost_ms) for h in hints(plain)] == [
        ("train.py:5", 0.0),
        ("train.py:9", 0.0),
    ]


def test_the_trace_has_a_track_per_cause_and_line_with_each_wait():
    doc = json.loads(render_trace(_report()))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"sync wait train.py:5", "sync wait train.py:9"} <= names
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "wait.sync"]
    assert [(s["ts"], s["dur"], s["name"]) for s in slices[:2]] == [
        (1000.0, 1000.0, "sync: item"),
        (3000.0, 6000.0, "sync: copy_to_host"),
    ]
    assert len(slices) == 4


def test_the_html_says_the_verdict_and_draws_a_stacked_bar_per_step():
    page = render_html(_report(), analyze(_report()))
    assert '<div id="fig-time"></div>' in page
    assert "Where each step" in page and '"barmode":"stack"' in page
    # the summary's first lines above the bars, the verdict first
    verdict = page.index("<div class=verdict><p>sync-bound: 10.0 ms per step over the step after")
    assert verdict < page.index('<div id="fig-time"></div>')
    assert "<p>costliest line: train.py:9, 8.0 ms of host time per step" in page[verdict:]


def test_the_live_status_line_says_the_last_steps_verdict():
    snap = LiveSnapshot(
        elapsed_s=1.0,
        totals={"ops": 10},
        devices=[],
        lines=[],
        line_count=2,
        events_recorded=0,
        counting="every_op",
        time={"step": 1, "verdict": "sync-bound", "shares_pct": {"sync": 70.0, "launch": 30.0},
              "wall_unprofiled_ms": 10.0},
    )  # fmt: skip
    again = decode(encode(snap))
    assert isinstance(again, LiveSnapshot) and again.time == snap.time
    text = status_text("running", 5.0, 42, again)
    assert text.endswith(
        "step 1 sync-bound: 10.0 ms per step, sync wait 70%, host work (Python + launch) 30% "
        "of the host's time (GPU not measured)"
    )


def test_last_step_is_empty_before_any_step():
    assert last_step(StepClock(0)) == {} and last_step(None) == {}
