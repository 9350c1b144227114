"""The renderers on a hand-made report: what a user reads in the summary and the HTML."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.analysis.hints import hints
from gpuwatch.output.html import render_html
from gpuwatch.output.text import summary
from profilers import Line, LineStats, OpCount, Report


def report() -> Report:
    line = LineStats("train.py", 42, "train", ["train.py:90 main"])
    line.source = "loss_log.append(loss.item())"
    for _ in range(25):
        line.d2h.add(4, True, False)
        line.syncs.add("item")
    line.ops = 50
    r = Report(command=["train.py"], duration_s=10.0).with_lines([Line.of(line)])
    samples = [
        {
            "t": t,
            "gpu": 0,
            "gpu_util_pct": u,
            "memory_used_bytes": m,
            "memory_total_bytes": 80 << 30,
            "pcie_tx_bytes_per_s": 0,
            "pcie_rx_bytes_per_s": 0,
        }
        for t, u, m in ((0.5, 20, 1 << 30), (1.0, 40, 3 << 30), (1.5, 30, 2 << 30))
    ]
    r = r.replace(gpu_samples=samples)
    return r


def text(renderable) -> str:
    out = io.StringIO()
    Console(file=out, width=140, color_system=None).print(renderable)
    return out.getvalue()


def test_summary_says_how_busy_the_gpu_was_and_points_at_the_line():
    shown = text(summary(report(), analyze(report())))
    # mean of 20, 40, 30 = 30%; the peak of 1, 3, 2 GiB
    assert "GPU 0: busy 30% of the run (mean NVML utilisation), memory peak 3.0 GiB" in shown
    assert "train.py:42" in shown and "25 (item 25)" in shown
    # no step ended: how often per step is not known, so it is never "every step"
    assert "logging fetches a value from the GPU in a loop" in shown
    assert "every step" not in shown.split("Hints")[1]


def test_hints_are_tied_to_their_line_with_evidence():
    (h,) = hints(report())
    assert (h.kind, h.where, h.evidence) == ("log_every_step", "train.py:42", "25 syncs (item 25)")


def test_html_has_the_busy_card_and_no_raw_user_strings():
    r = report()
    r = r.with_lines([dataclasses.replace(r.lines[0], source="x = '<script>alert(1)</script>'")])
    page = render_html(r, analyze(r))
    assert "<b>30%</b><span>GPU 0 busy (mean NVML utilisation)</span>" in page
    assert "<script>alert(1)</script>" not in page


def test_lines_show_the_time_of_their_backward():
    r = report()
    fwd = LineStats("model.py", 7, "forward")
    fwd.source = "h = self.conv(x)"
    fwd.op_breakdown["convolution.default"] = OpCount(10, 4.0)
    fwd.backward["convolution_backward.default"] = OpCount(10, 9.5)
    fwd.settle()
    r = r.with_lines([*r.lines, Line.of(fwd)])
    shown = text(summary(r, analyze(r)))
    assert "Top lines by the time of their backward" in shown
    assert "model.py:7" in shown and "9.5 ms in 10 ops" in shown
    page = render_html(r, analyze(r))
    assert "its backward</th>" in page and "<td>9.5 ms</td>" in page
    # The chart counts each op once: its bars add up to the run's kernel time.
    assert "the .backward() line holds the whole backward" in page
    assert "its backward: %{customdata[1]} (part of the .backward() line" in page
    # A report with no backward data shows no such table.
    assert "by the time of their backward" not in text(summary(report(), analyze(report())))


def test_charts_with_nothing_to_draw_are_a_sentence():
    r = Report(command=["idle.py"], duration_s=1.0)
    page = render_html(r, analyze(r))
    assert 'id="fig-' not in page
    for why in (
        "No copy or sync happened: the timeline is empty.",
        "No bytes moved between host and GPUs.",
        "No kernel time was measured",
        "No syncs: the host never waited for a GPU.",
    ):
        assert f"<p class=empty>{why}" in page
    # With copies and syncs (the hand-made report), the charts are drawn.
    page = render_html(report(), analyze(report()))
    assert all(f'id="fig-{name}"' in page for name in ("timeline", "bytes", "syncs"))


def test_pcie_line_has_its_own_axis_range():
    from gpuwatch.output.html_charts import _timeline

    r = report()
    r = r.replace(
        gpu_samples=[{**s, "pcie_rx_bytes_per_s": 3e9} for s in r.gpu_samples]
    )  # 3000 MB/s
    fig = _timeline(r)
    util_axis, pcie_axis = fig.layout.yaxis2, fig.layout.yaxis3
    assert tuple(util_axis.range) == (0, 100) and util_axis.title.text == "util %"
    assert pcie_axis.range is None and pcie_axis.title.text == "PCIe MB/s"  # autoranged
