"""Reports that are not what they claim: a FIFO no one writes, a world of 10**12 ranks, kernel
times whose sum overflows a float. Each is one line, at once, never a hang, unbounded memory or
a JSON file holding ``Infinity``."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from gpuwatch.errors import CliError
from gpuwatch.report.load import load_report, parse
from profilers import Report
from profilers.merge import MAX_WORLD_SIZE, MergeError, merge_ranks
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
    text = json.dumps(rich_report())

    def write() -> None:
        with open(fifo, "w") as f:  # blocks until the reader opens it
            for i in range(0, len(text), 100):
                f.write(text[i : i + 100])
                f.flush()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    kind, report = within(10, lambda: _read_when_writer_opens(fifo))
    assert kind == "ok" and report.command == ["train.py", "--lr", "3"]


def _read_when_writer_opens(fifo: Path) -> Report:
    # NB: a reader that opens before the writer sees "no writer"; the user's `gpuwatch report
    # <(cat r.json)` always has its writer first. Retry until the writer is there.
    deadline = time.monotonic() + 5
    while True:
        try:
            return load_report(str(fifo))
        except CliError as exc:
            if "nothing written" not in str(exc) or time.monotonic() > deadline:
                raise


def test_a_device_is_refused_not_read_forever():
    kind, exc = within(5, lambda: load_report("/dev/zero"))
    assert kind == "raised" and str(exc) == (
        "/dev/zero is not a regular file (a device or socket), not a report"
    )


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


def test_kernel_times_that_overflow_are_refused_never_written_as_infinity():
    doc = rich_report()
    doc["sites"][0]["kernel_time_ms"] = 1e308
    with pytest.raises(CliError, match=r"at sites/0/kernel_time_ms: 1e\+308 is greater than"):
        parse(json.dumps(doc), "r.json")
    # reports made in memory (not read through the schema) are still guarded at merge
    ranks = []
    for rank in (0, 1):
        r = Report.from_dict({**doc, "rank": rank, "world_size": 2})
        ranks.append(r)
    with pytest.raises(MergeError, match="add up to more than a float holds"):
        merge_ranks(ranks)
