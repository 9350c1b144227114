"""The published JSON Schemas hold for what gpuwatch writes, and the report reader turns any
file at all into a report or one line (exit 2), never a traceback or a changed output file."""

from __future__ import annotations

import copy
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.errors import CliError
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.output.html import render_html
from gpuwatch.output.load import load_report, parse, problem, schema
from gpuwatch.output.text import summary
from profilers import Line, LineStats, OpCount, OpTotal, RunOptions


def rich_report() -> dict[str, Any]:
    """A report document with every optional part filled in (as a profiled run writes it)."""
    from profilers import Report

    line = LineStats("train.py", 12, "main", ["train.py:40 <module>"])
    line.source = "loss.item()"
    line.op_breakdown["_local_scalar_dense.default"] = OpCount(3, 0.5)
    line.backward["mm.default"] = OpCount(2, 1.0)
    line.syncs.add("item")
    line.h2d.add(4096, True, False)
    line.copy_dtypes["float32"] = 4096
    line.settle()
    report = Report(
        command=["train.py", "--lr", "3"],
        duration_s=1.5,
        devices=[{"device": "cuda:0", "name": "H100"}, {"device": "cpu", "name": "host"}],
        partial=True,
        error="stopped by SIGTERM",
        started_at="2026-11-23T18:00:00+00:00",
        options=RunOptions(gpu_stats="demo", kernel_timing_source="host"),
        gpu_samples=[
            {
                "t": 0.5,
                "gpu": 0,
                "name": "H100",
                "uuid": "GPU-1",
                "script_sm_util_pct": 30,
                "gpu_util_pct": 40,
                "memory_used_bytes": 10,
                "memory_total_bytes": 100,
                "pcie_tx_bytes_per_s": 1,
                "pcie_rx_bytes_per_s": 2,
            }
        ],
        internal_errors={"_to_copy.default": {"count": 2, "error": "RuntimeError: x"}},
    )
    report = report.with_lines([Line.of(line)])
    report = report.replace(
        timeline={
            "capacity": 10,
            "recorded": 1,
            "dropped": 0,
            "events": [
                {"t": 0.1, "direction": "h2d", "bytes": 4096, "sync": None, "site": "train.py:12"}
            ],
        }
    )
    return report.to_dict()


def test_the_profile_writer_matches_its_published_schema():
    import torch

    import profilers

    with profilers.profile() as prof:
        torch.ones(3).add(1).sum().item()
    assert problem(prof.report(command=["x.py"]).to_dict()) is None
    assert problem(rich_report()) is None


def test_the_snapshot_writer_matches_its_published_schema():
    snap = Sampler(FakeBackend(gpu_count=2), background_pcie=False).snapshot().to_dict()
    assert problem(snap, "gpuwatch.snapshot/1") is None
    snap["gpus"][0]["memory_used_bytes"] = "9 GiB"  # the schema does check
    assert problem(snap, "gpuwatch.snapshot/1") is not None


def test_the_schemas_are_valid_json_schema():
    from jsonschema import Draft202012Validator

    for name in ("gpuwatch.profile/1", "gpuwatch.snapshot/1"):
        Draft202012Validator.check_schema(schema(name))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(partial="false"), "at partial: 'false' is not of type 'boolean'"),
        (lambda d: d["totals"].pop("h2d"), "at totals: 'h2d' is a required property"),
        (lambda d: d["sites"][0].update(line="12"), "at sites/0/line: '12' is not of type"),
        (lambda d: d.update(exit_code=None), "at exit_code: None is not of type 'integer'"),
    ],
)
def test_damaged_reports_get_one_line_naming_the_field(mutate, message):
    doc = rich_report()
    mutate(doc)
    with pytest.raises(CliError) as exc:
        parse(json.dumps(doc), "r.json")
    assert str(exc.value).startswith("damaged gpuwatch profile r.json: " + message)


def test_nan_and_huge_numbers_are_refused():
    text = json.dumps(rich_report()).replace('"duration_s": 1.5', '"duration_s": NaN')
    with pytest.raises(CliError, match="NaN is not a number JSON allows"):
        parse(text, "r.json")
    text = json.dumps(rich_report()).replace('"duration_s": 1.5', '"duration_s": 1e999')
    with pytest.raises(CliError, match="number out of range"):
        parse(text, "r.json")


def render_all(report: Any) -> None:
    Console(file=io.StringIO(), width=100).print(summary(report, analyze(report), top=5))
    render_html(report, analyze(report))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    # NB: copied per draw: the one {} placed twice could end up inside itself (a cycle no file has)
    st.sampled_from([[], {}, [None], [{}], "cuda:x", "cuda:"]).map(copy.deepcopy),
)


def load_and_render_or_one_line(doc: Any) -> None:
    """Whatever loads, renders; whatever does not gets one line."""
    try:
        report = parse(json.dumps(doc), "r.json")[0]
    except CliError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    render_all(report)


@pytest.mark.parametrize("field", ["gpu_util_pct", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"])
def test_a_gpu_sample_without_an_optional_field_renders(field):
    # What the fuzzing below found: the HTML timeline read these fields of a sample as required.
    doc = rich_report()
    del doc["gpu_samples"][0][field]
    parse(json.dumps(doc), "r.json")  # the schema allows it
    load_and_render_or_one_line(doc)


# NB: about 1 example in 10 loads, and each of those renders the HTML (plotly: about 0.2 s);
# 100 examples are 3 s (300 took 21 s in the suite on a loaded machine). What it has found, the
# fields above, are tests of their own; 1500 examples, run once when the count was lowered,
# found nothing more.
@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_reports_load_and_render_or_get_one_line(data):
    doc = rich_report()
    paths = _paths(doc)[1:]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            action = data.draw(st.sampled_from(["replace", "delete"]))
            if action == "delete" and isinstance(target, dict):
                target.pop(path[-1], None)
            elif isinstance(target, dict | list):
                target[path[-1]] = data.draw(JUNK)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the way there
    load_and_render_or_one_line(doc)


def test_truncated_and_byte_flipped_files(tmp_path: Path):
    good = json.dumps(rich_report(), indent=1).encode()
    rng = random.Random(7)
    for i in range(60):
        data = bytearray(good)
        if i % 2:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(3):
                data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"r{i}.json"
        path.write_bytes(bytes(data))
        try:
            report = load_report(str(path))
        except CliError as exc:
            assert "\n" not in str(exc)
            continue
        render_all(report)


def test_report_on_a_damaged_file_leaves_the_html_as_it_was(tmp_path, monkeypatch, capsys):
    from gpuwatch.cli import main as cli

    monkeypatch.chdir(tmp_path)
    doc = rich_report()
    doc["sites"][0]["ops"] = -1
    (tmp_path / "r.json").write_text(json.dumps(doc))
    (tmp_path / "out.html").write_text("yesterday's report")
    assert cli.main(["report", "r.json", "--html", "out.html"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "gpuwatch: error: damaged gpuwatch profile r.json: at sites/0/ops: -1 is less than the minimum of 0\n"
    )
    assert (tmp_path / "out.html").read_text() == "yesterday's report"


def test_a_saved_report_round_trips_through_the_reader(tmp_path):
    doc = rich_report()
    (tmp_path / "r.json").write_text(json.dumps(doc))
    again = load_report(str(tmp_path / "r.json")).to_dict()
    assert again["internal_errors"] == doc["internal_errors"] and again["partial"] is True
    assert again["totals"] == doc["totals"] and copy.deepcopy(again["sites"]) == doc["sites"]


@pytest.mark.slow
def test_rendering_a_saved_report_never_imports_torch(tmp_path):
    import subprocess
    import sys

    (tmp_path / "r.json").write_text(json.dumps(rich_report()))
    code = (
        "import sys\n"
        "from gpuwatch.cli import main as cli\n"
        "code = cli.main(['report', 'r.json', '--html', 'r.html'])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"  # 1.3 s of torch import saved on every report
    assert (tmp_path / "r.html").stat().st_size > 100_000


def test_a_line_read_back_and_cut_again_keeps_every_op():
    # A report read back holds "(other ops)" for what its top ops left out; written again with
    # fewer top ops, that entry can be among them: the new cut's rest adds to it.
    line = LineStats("train.py", 3, "main")
    for name, n, ms in [("mm.default", 4, 3.0), ("add.Tensor", 2, 2.0), ("mul.Tensor", 5, 1.5)]:
        line.op_breakdown[name] = OpCount(n, ms)
        line.backward[name] = OpCount(n, ms)
    line.settle()
    once = Line.from_dict(Line.of(line).to_dict(top_ops=1))  # mm shown, the rest: 7 ops, 3.5 ms
    assert once.op_breakdown == {"mm.default": OpTotal(4, 3.0), "(other ops)": OpTotal(7, 3.5)}
    # cut to 1 again, "(other ops)" is the top one: mm's 4 ops join it, none is lost
    twice = Line.from_dict(once.to_dict(top_ops=1))
    assert twice.op_breakdown == {"(other ops)": OpTotal(11, 6.5)}
    assert twice.backward == twice.op_breakdown and twice.backward_ops == 11
    assert twice.ops == 11 and twice.kernel_time_ms == 6.5
