"""Findings are data: the verdict, causes, line costs, hints, what-if rows and the ranks' spread
are written into the run's JSON under ``findings`` (schema-checked), and ``gpuwatch report
run.json`` renders from them what the run rendered, without analysing again. Every document's
outputs are written by one renderer registry, where a file that fails costs only itself."""

from __future__ import annotations

import json
import sys

import pytest

from gpuwatch.analysis import analyze
from gpuwatch.cli.main import main
from gpuwatch.errors import CliError
from gpuwatch.output import deliver as delivering
from gpuwatch.output.load import parse, problem
from gpuwatch.output.renderers import endings, register, renderer
from gpuwatch.output.write import Output
from tests.test_time_render import _report


def _saved(tmp_path, capsys) -> tuple[str, str]:
    path = tmp_path / "run.json"
    out = [Output("json", str(path))]
    assert delivering.deliver(_report(), out, top=5, quiet=False, file=sys.stdout) is False
    return str(path), capsys.readouterr().out


def test_the_json_holds_the_findings_as_data(tmp_path, capsys):
    path, _ = _saved(tmp_path, capsys)
    doc = json.loads(open(path).read())
    assert problem(doc, strict=True) is None
    found, expected = doc["findings"], analyze(_report())
    # two steps of 10 ms: 6 ms waiting in .cpu() at line 9 (8 ms with the host work charged to
    # it, as the summary's costliest line says), 1 ms in .item() at line 5
    assert found["verdict"]["kind"] == expected.verdict.kind == "sync-bound"
    assert found["verdict"]["step_ms"] == pytest.approx(10.0)
    assert found["verdict"]["causes_ms"]["sync"] == pytest.approx(7.0)
    assert found["line_costs"][0] == {
        "line": "train.py:9",
        "ms_per_step": pytest.approx(8.0),
        "pct_of_step": pytest.approx(80.0),
    }
    hint = found["hints"][0]
    assert {"kind", "message", "evidence", "cost_ms", "saving_ms", "lines", "saved"} <= set(hint)
    assert (hint["line"]["file"], hint["line"]["line"]) == ("train.py", 9)
    assert [h["kind"] for h in found["hints"]] == [h.kind for h in expected.hints]


def test_a_saved_run_renders_from_its_findings_what_the_run_printed(tmp_path, capsys, monkeypatch):
    path, printed = _saved(tmp_path, capsys)

    def never(report: object) -> object:
        raise AssertionError("a saved run is analysed again")

    monkeypatch.setattr(delivering, "analyze", never)
    assert main(["report", path]) == 0
    assert capsys.readouterr().out == printed
    assert "sync-bound: 10.0 ms per step" in printed


def test_damaged_findings_get_one_line_naming_the_field(tmp_path, capsys):
    path, _ = _saved(tmp_path, capsys)
    doc = json.loads(open(path).read())
    doc["findings"]["hints"][0]["cost_ms"] = "6 ms"
    with pytest.raises(CliError) as exc:
        parse(json.dumps(doc), "r.json")
    assert str(exc.value).startswith("damaged gpuwatch profile r.json: at findings/hints/0/cost_ms")


def test_one_registry_for_the_three_documents():
    assert renderer("profile", "html").endings == (".html", ".htm")
    assert {renderer(doc, "json").document for doc in ("profile", "trace", "diff")} == {
        "profile",
        "trace",
        "diff",
    }
    assert endings("profile")[0] == (".trace.json", "trace")  # before .json
    with pytest.raises(ValueError, match="unknown report kind 'trace'"):
        renderer("diff", "trace")
    with pytest.raises(ValueError, match="registered twice"):
        register("diff", "html")(lambda d: "")


def test_a_diff_file_that_cannot_be_written_never_stops_the_others(tmp_path, capsys):
    run, _ = _saved(tmp_path, capsys)
    out = tmp_path / "d.json"
    # /dev/full passes the checks before the diff and fails the write (no space left)
    assert main(["diff", run, run, "--html", "/dev/full", "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert json.loads(out.read_text())["schema"] == "gpuwatch.diff/1"
    assert err.splitlines() == [
        "gpuwatch: error: cannot write the report to /dev/full: No space left on device"
    ]


def test_analyze_gives_each_documents_findings_as_its_command_shows_them(tmp_path):
    from gpuwatch.analysis.diff import diff_reports
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.analysis.findings import Findings
    from gpuwatch.output.kineto_pool import read_ranks
    from profilers.kineto.read import read_trace
    from profilers.kineto.result import TraceAnalysis
    from tests.kineto_helpers import TraceBuilder

    run = _report()
    assert isinstance(analyze(run), Findings)
    d = analyze(diff_reports(run, run, ("a.json", "b.json")))
    assert isinstance(d, DiffDoc) and (d.before.path, d.after.path) == ("a.json", "b.json")
    assert d.changed() == [] and d.doc["schema"] == "gpuwatch.diff/1"
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 54, 58, 40)
    path = str(t.write(tmp_path / "t.json"))
    rank = read_trace(path)
    assert not isinstance(rank, Exception)
    found = analyze(rank)
    assert isinstance(found, TraceAnalysis)
    assert found.to_json() == read_ranks([path], jobs=1).to_json()  # gpuwatch report TRACE's
