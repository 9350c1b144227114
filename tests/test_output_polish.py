"""What the summary and the HTML say per line: collectives per line (and their line numbers whole
at 80 columns), "not measured" rather than 0 µs, every line visible on the bytes chart, one
thousands separator everywhere."""

from __future__ import annotations

import io
import json

import pytest
import torch
import torch.distributed as dist
from rich.console import Console

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.output.collectives import comm_html, comm_text
from gpuwatch.output.html import render_html
from gpuwatch.output.html_charts import _bytes_per_line
from gpuwatch.output.text import summary
from tests.profiler_helpers import fake_mode, line_of

pytestmark = pytest.mark.slow


def _collectives() -> profilers.Report:
    # NB: a one-rank gloo group in this process: the collectives reach the dispatcher as in a
    # torchrun rank (tests/test_distributed.py checks the bytes across real ranks).
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        with profilers.profile(kernel_timing=False) as prof:
            t = torch.ones(1000)
            for _ in range(1200):
                dist.all_reduce(t)  # @all_reduce
            dist.broadcast(t, 0)  # @broadcast
    finally:
        dist.destroy_process_group()
    return prof.report()


def _plain(*renderables: object, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(*renderables)
    return out.getvalue()


def test_collectives_per_line_in_the_summary_at_80_columns_and_in_the_html():
    r = _collectives()
    text = _plain(*comm_text(r, 5))
    here = "tests/test_output_polish.py"
    # the line number stays whole at 80 columns (it was cut to "tests/test_output_polish.py…")
    assert f"{here}:{line_of('all_reduce')}" in text and f"{here}:{line_of('broadcast')}" in text
    assert "all_reduce 1,200" in text  # one thousands separator, as in every table
    page = comm_html(r, analyze(r).spreads)
    assert "<h3>Collectives per line</h3>" in page
    row = page[page.index(f"<code>{here}:{line_of('all_reduce')}</code>") :]
    # 1,200 all-reduces of 1000 float32: 4,800,000 bytes
    assert row.startswith(
        f"<code>{here}:{line_of('all_reduce')}</code></td><td class=l>all_reduce 1,200</td>"
        "<td>4.6 MiB</td>"
    )


def test_untimed_runs_say_not_measured_per_line_and_the_bytes_chart_is_logarithmic():
    with fake_mode():
        with profilers.profile(kernel_timing=False) as prof:
            torch.randn(1024, 1024).to("cuda:0")  # @big 4 MiB
            for _ in range(1100):
                small = torch.ones(1).to("cuda:0")  # @small 4 bytes each
                small.sum().item()
    r = prof.report()
    page = render_html(r, analyze(r))
    top = page[page.index("<h2>Top lines</h2>") :]
    assert "<td>not measured</td>" in top and "<td>0 µs</td>" not in top
    fig = _bytes_per_line(r)
    # 4 MiB beside 4,400 bytes (each way): on a linear axis a small line's bar is 0.1% of the big
    assert fig.layout.xaxis.type == "log"
    lines = range(len(fig.data[0].y))
    assert sorted(sum(b.x[i] for b in fig.data) for i in lines) == [4400, 4400, 4 * 1024 * 1024]
    shown = _plain(summary(r, analyze(r)), width=120)
    assert "1,100 (copy_to_device 1,100)" in shown.replace("item 1,100, ", "")
    doc = json.loads(r.to_json())
    assert doc["options"]["kernel_timing"] is False
