"""Reports that are not what they claim: a FIFO no one writes, a world of 10**12 ranks, kernel
times whose sum overflows a float. Each is one line, at once, never a hang, unbounded memory or
a JSON file holding ``Infinity``."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.errors import CliError
from gpuwatch.output.load import load_report, parse, problem
from profilers import Report
from profilers.merge import MAX_WORLD_SIZE, MergeError, merge_ranks
from tests import conftest
from tests.test_report_schema import rich_report


def within(seconds: float, fn):  # type: ignore[no-untyped-def]
    """``fn()``'s result or exception, failing if it takes over ``seconds`` (never a hung test)."""
    box: list = []

    def run() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001
            box.append(("raised", exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert box, f"still running after {seconds} s"
    return box[0]


def test_a_fifo_with_no_writer_is_one_line_at_once(tmp_path: Path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    kind, exc = within(5, lambda: load_report(str(fifo)))
    assert kind == "raised" and isinstance(exc, CliError)
    assert str(exc) == f"{fifo} is a pipe with nothing written to it (no writer?), not a report"
    assert time.monotonic() - started < 2


def test_a_fifo_with_a_writer_is_read(tmp_path: Path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    command = ["train.py", *["--a-long-argument"] * 10_000]
    data = json.dumps({**rich_report(), "command": command}).encode()
    assert len(data) > 2 * 65536  # more than a pipe holds: the writer waits for the reader
    # NB: as with `gpuwatch report <(cat r.json)`, the writer is there before the reader opens
    # (a reader that came first would rightly see no writer), and a read end stays open (bash
    # hands gpuwatch one): what is written before the reader opens is kept, not dropped.
    keep = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    fd = os.open(fifo, os.O_WRONLY)  # there is a reader: no wait

    def write() -> None:
        with open(fd, "wb", buffering=0) as f:
            for i in range(0, len(data), 1000):
                f.write(data[i : i + 1000])

    try:
        threading.Thread(target=write, daemon=True).start()
        kind, report = within(10, lambda: load_report(str(fifo)))
    finally:
        os.close(keep)
    assert kind == "ok" and report.command == command


def test_a_device_is_refused_not_read_forever():
    kind, exc = within(5, lambda: load_report("/dev/zero"))
    assert kind == "raised" and str(exc) == (
        "/dev/zero is not a regular file (a device or socket), not a report"
    )


def test_a_device_named_as_a_trace_is_refused_by_the_library_too():
    from profilers.kineto.read import TraceError, read_traces

    kind, exc = within(5, lambda: read_traces(["/dev/zero"]))
    assert kind == "raised" and isinstance(exc, TraceError)
    assert str(exc) == "/dev/zero is not a regular file (a device or socket), not a trace"


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3_000_000 * 1024,) * 2)  # `ulimit -v 3000000`


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t.json", "t.json.gz", "r.json"])
def test_a_tiny_file_is_reported_under_a_containers_memory_limit(tmp_path: Path, name: str):
    from tests.helpers import GPUWATCH, run
    from tests.kineto_helpers import TraceBuilder

    path = tmp_path / name
    if name == "r.json":
        path.write_text(json.dumps(rich_report()))
    else:
        t = TraceBuilder()
        t.step(7, 0, 100)
        t.launch("aten::conv2d", 61, 65, 30)
        t.write(path, gz=name.endswith(".gz"))
    done = run([*GPUWATCH, "report", str(path)], tmp_path, preexec_fn=_limit_memory)
    assert done.returncode == 0 and "MemoryError" not in done.stderr, done.stderr
    summary = "gpuwatch profile train.py" if name == "r.json" else f"torch.profiler trace {name}"
    assert summary in done.stdout


def test_a_world_of_10_to_the_12_is_refused_by_the_schema():
    doc = {**rich_report(), "world_size": 10**12, "rank": 0}
    with pytest.raises(CliError) as err:
        parse(json.dumps(doc), "r.json")
    assert str(err.value) == (
        "damaged gpuwatch profile r.json: at world_size: 1000000000000 is greater than the "
        f"maximum of {MAX_WORLD_SIZE}"
    )


def test_a_merge_of_a_huge_world_is_bounded_and_names_the_missing_ranks_briefly():
    r0 = Report.from_dict({**rich_report(), "world_size": MAX_WORLD_SIZE, "rank": 0})
    merged = merge_ranks([r0])
    assert merged.missing_ranks == list(range(1, MAX_WORLD_SIZE))
    assert merged.error is not None and merged.error.endswith(
        f"no report from ranks 1-{MAX_WORLD_SIZE - 1}"
    )
    too_big = Report.from_dict({**rich_report(), "world_size": MAX_WORLD_SIZE + 1, "rank": 0})
    with pytest.raises(MergeError, match="a world of 65,537 ranks: gpuwatch merges at most"):
        merge_ranks([too_big])


def test_kernel_times_that_overflow_are_refused_on_input_and_written_null_when_summed(
    tmp_path: Path,
):
    doc = rich_report()
    doc["sites"][0]["kernel_time_ms"] = 1e308
    with pytest.raises(CliError, match=r"at sites/0/kernel_time_ms: 1e\+308 is greater than"):
        parse(json.dumps(doc), "r.json")
    # reports made in memory (not read through the schema): their sum overflows at the merge;
    # the merged report is written all the same, that figure null, and reads back
    ranks = [Report.from_dict({**doc, "rank": rank, "world_size": 2}) for rank in (0, 1)]
    merged = merge_ranks(ranks)
    text = merged.to_json()
    written = json.loads(text, parse_constant=_refuse)
    assert written["sites"][0]["kernel_time_ms"] is None
    assert written["not_finite"] == ["/sites/0/kernel_time_ms"]
    assert written["sites"][0]["by_rank"]["1"]["kernel_time_ms"] == 1e308  # each rank's own
    assert problem(written) is None  # the published schema holds what is written
    (tmp_path / "merged.json").write_text(text)
    again = load_report(str(tmp_path / "merged.json"))
    assert math.isinf(merged.lines[0].kernel_time_ms) and math.isnan(again.lines[0].kernel_time_ms)


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} written: JSON has no such number")


def _poison(node: Any, cycle: Iterator[float]) -> None:
    """Every float of ``node`` made NaN, +Infinity or -Infinity in turn (in place)."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
        if isinstance(value, float):
            node[key] = next(cycle)
        elif isinstance(value, dict | list):
            _poison(value, cycle)


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
def test_every_figure_not_finite_is_written_null_and_read_back_by_every_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    import torch

    import profilers
    from gpuwatch.cli.main import main
    from tests.test_whatif_wired import _fake_run

    def work() -> None:
        host = torch.randn(64, 64)
        for _ in range(3):
            x = host.to("cuda:0", non_blocking=True)
            (x @ x).sum().item()
            profilers.step()

    run, _ = _fake_run(work)
    doc = run.to_dict()
    assert {"time", "what_if", "predicted"} <= doc.keys()  # every part that holds figures
    _poison(doc, itertools.cycle([math.nan, math.inf, -math.inf]))
    expected = {p for p in _float_pointers(doc)}
    assert len(expected) > 50
    r0, r1 = tmp_path / "r0.json", tmp_path / "r1.json"
    Report.from_dict({**doc, "rank": 0, "world_size": 2}).save(r0)  # the library's writer
    Report.from_dict({**doc, "rank": 1, "world_size": 2}).save(r1)
    for path in (r0, r1):
        written = json.loads(path.read_text(), parse_constant=_refuse)
        assert problem(written) is None
    assert set(json.loads(r0.read_text())["not_finite"]) == expected
    # gpuwatch report writes every kind of output from it, and reads its JSON back
    out = {k: str(tmp_path / f"out{k}") for k in (".json", ".html", ".trace.json")}
    args = ["report", str(r0), "-q", *[a for p in out.values() for a in ("-o", p)]]
    assert main(args) == 0
    again = json.loads(Path(out[".json"]).read_text(), parse_constant=_refuse)
    assert problem(again) is None and expected <= set(again["not_finite"])
    # NB: the findings worked out from such figures are not finite either, and said so
    assert all(p.startswith("/findings/") for p in set(again["not_finite"]) - expected)
    assert main(["report", out[".json"], "-o", str(tmp_path / "again.html")]) == 0
    json.loads(Path(out[".trace.json"]).read_text(), parse_constant=_refuse)
    capsys.readouterr()
    assert main(["report", str(r0)]) == 0 and main(["report", str(r0), "--what-if"]) == 0
    shown = capsys.readouterr().out
    assert "not finite" in shown and not re.search(r"\b(nan|inf)\b", shown, re.IGNORECASE)
    assert main(["report", out[".json"], "-q", "--json", str(tmp_path / "twice.json")]) == 0
    assert json.loads((tmp_path / "twice.json").read_text())["not_finite"] == again["not_finite"]
    # the merge of two ranks, and a diff of two runs, as JSON
    merged = str(tmp_path / "merged.json")
    assert main(["report", str(r0), str(r1), "-q", "--json", merged]) == 0
    assert problem(json.loads(Path(merged).read_text(), parse_constant=_refuse)) is None
    load_report(merged)
    diff = tmp_path / "diff.json"
    assert main(["diff", str(r0), out[".json"], "--json", str(diff), "-o", f"{diff}.html"]) == 0
    diff_doc = json.loads(diff.read_text(), parse_constant=_refuse)
    assert problem(diff_doc, "gpuwatch.diff/1") is None


def _float_pointers(node: Any, path: str = "") -> Iterator[str]:
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        where = f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"
        if isinstance(value, float):
            yield where
        elif isinstance(value, dict | list):
            yield from _float_pointers(value, where)


def test_a_null_figure_not_listed_or_a_listing_that_lies_is_one_line():
    doc = rich_report()
    doc["sites"][0]["kernel_time_ms"] = None  # null, but not said to be not finite
    with pytest.raises(CliError, match="damaged gpuwatch profile r.json: at sites/0/kernel_time_ms: "
                       "None is not of type 'number'"):  # fmt: skip
        parse(json.dumps(doc), "r.json")
    for listed, why in [
        (["/sites/0/line"], "not_finite lists /sites/0/line, which is not null"),
        (["/sites/9/kernel_time_ms"], "which the document does not hold"),
        ("everything", "not_finite is not a list of at most"),
        ([7], "not_finite holds '7', not a JSON Pointer"),
    ]:
        with pytest.raises(CliError, match=re.escape(why)):
            parse(json.dumps({**doc, "not_finite": listed}), "r.json")
    # listed and null: read as not finite
    r = parse(json.dumps({**doc, "not_finite": ["/sites/0/kernel_time_ms"]}), "r.json")[0]
    assert math.isnan(r.lines[0].kernel_time_ms)


def test_the_library_reads_back_what_it_writes():
    doc = rich_report()
    doc["sites"][0]["kernel_time_ms"] = math.inf
    doc["duration_s"] = math.nan
    text = Report.from_dict(doc).to_json()
    again = Report.from_dict(json.loads(text, parse_constant=_refuse))
    assert math.isnan(again.lines[0].kernel_time_ms) and math.isnan(again.duration_s)
    assert json.loads(again.to_json())["not_finite"] == ["/duration_s", "/sites/0/kernel_time_ms"]
