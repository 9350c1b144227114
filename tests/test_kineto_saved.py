"""A trace's analysis saved as JSON (``gpuwatch report TRACE --json A``) is the analysis: read
back (``gpuwatch report A``) it prints the same summary and writes the same HTML and JSON, and
what it cannot give again (the Perfetto timeline) is refused in one line."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuwatch.output.kineto_html import render_html
from gpuwatch.output.kineto_pool import read_ranks
from gpuwatch.output.kineto_text import summary_lines
from profilers.kineto.result import TraceAnalysis, analysis_from_dict
from tests.kineto_helpers import TraceBuilder
from tests.shared_traces import SHARED_TRACES, needs_shared_traces

TRACES = [
    "two_ranks",
    "event_sync_trace.json.gz",
    "Falconsai_nsfw_image_detection__1016002.json.gz",
    "hta-figures/hta_nccl_data",
    "hta-figures/hta_negative_queue_rank0",
]


def _again(analysis: TraceAnalysis) -> TraceAnalysis:
    return analysis_from_dict(json.loads(analysis.to_json()))


def _same_outputs(analysis: TraceAnalysis) -> None:
    back = _again(analysis)
    assert back.to_json() == analysis.to_json()
    assert summary_lines(back, 5) == summary_lines(analysis, 5)
    assert render_html(back) == render_html(analysis)


@needs_shared_traces
@pytest.mark.parametrize("name", TRACES)
def test_a_saved_analysis_of_a_real_trace_renders_as_the_trace_did(name):
    _same_outputs(read_ranks([str(SHARED_TRACES / name)], jobs=1))


def test_a_saved_analysis_keeps_the_lines_and_functions_it_charged(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.python("train.py(30): <module>", 0, 100)
    t.python("train.py(12): train_step", 5, 60)
    ext = t.op("aten::copy_", 9, 42)
    corr = t.runtime("cudaMemcpyAsync", 10, 40, ext)
    t.memcpy("HtoD (Pageable -> Device)", 45, 5, corr, 1 << 20)
    t.launch("aten::mm", 54, 58, 40)
    path = tmp_path / "t.json"
    t.write(path)
    analysis = read_ranks([str(path)], jobs=1)
    rank = _again(analysis).ranks[0]
    assert [(c.where.file, c.where.line, c.where.function) for c in rank.copy_lines] == [
        ("train.py", 12, "train_step")
    ]
    _same_outputs(analysis)


@pytest.mark.slow
def test_gpuwatch_report_reads_a_saved_analysis_back(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 54, 58, 40)
    trace, saved = tmp_path / "t.json", tmp_path / "a.json"
    t.write(trace)

    def report(*args: object) -> subprocess.CompletedProcess[str]:
        command = ["gpuwatch", "report", *map(str, args)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    first = report(trace, "--json", saved)
    again = report(saved)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert again.stdout == first.stdout.replace(f"gpuwatch: wrote {saved}\n", "")
    refused = report(saved, "--trace", tmp_path / "x.json")
    assert refused.returncode == 2 and not (tmp_path / "x.json").exists()
    assert refused.stderr.count("\n") == 1 and "keeps no timeline" in refused.stderr
    doc = json.loads(saved.read_text())
    doc["ranks"][0]["run"][0]["busy_ms"] = "lots"
    saved.write_text(json.dumps(doc))
    damaged = report(saved)
    assert damaged.returncode == 2 and damaged.stderr.count("\n") == 1
    assert "damaged gpuwatch trace analysis" in damaged.stderr and "Traceback" not in damaged.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"schema": "gpuwatch.kineto/1", "paths": [', "cannot read"),
        (
            '{"schema": "gpuwatch.kineto/1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "cannot read",
        ),
        ('{"schema": "gpuwatch.kineto/1", "paths": [], "ranks": [{}]}', "damaged"),
    ],
)
def test_a_damaged_saved_analysis_is_one_line(tmp_path, text, says):
    from gpuwatch.errors import CliError
    from gpuwatch.output.kineto_load import load_saved

    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(CliError, match=says) as caught:
        load_saved(str(path))
    assert "\n" not in str(caught.value)
