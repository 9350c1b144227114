"""``gpuwatch diff``: lines matched across an edit, per step, JSON in its published schema, HTML,
--budget on growth; ``gpuwatch report`` refusing to merge two runs; the demos naive vs fixed."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace

import pytest

from gpuwatch.analysis.diff import RunDiff, diff_reports
from gpuwatch.analysis.diff_findings import DiffDoc
from gpuwatch.cli import main as cli
from gpuwatch.output.load import problem
from profilers import Copies, Line, Report, Syncs
from profilers.libraries import LibraryFrame
from tests.conftest import FAKE_CUDA_MISSING


def _doc(d: RunDiff) -> DiffDoc:
    """The diff as its outputs show it: read from the document it writes."""
    return DiffDoc.written(d.to_dict())


def _line(line: int, function: str, source: str, items: int = 0, h2d: int = 0) -> Line:
    return Line(
        file="train.py",
        line=line,
        function=function,
        source=source,
        syncs=Syncs(items, {"item": items} if items else {}),
        h2d=Copies(h2d, 1024 * h2d, h2d, 0),
    )


def _run(lines: list[Line], steps: int, command: str) -> Report:
    return Report(command=[command], steps={"count": steps, "source": "optimizer"}).with_lines(
        lines
    )


# before: 10 steps; after: 20 steps (figures compare per step)
BEFORE = _run(
    [
        _line(10, "train", "losses.append(loss.item())  # MISTAKE", items=10),
        _line(11, "train", "xb = xb.to(device)", h2d=10),
        _line(12, "train", "out = model(xb)"),
        _line(30, "helper", "y = y.cpu()", items=0, h2d=0),
        _line(40, "train", "print(acc.item())", items=10),
    ],
    10,
    "train.py",
)
AFTER = _run(
    [
        _line(14, "train", "losses.append(loss.item())  # still here, comment changed", items=20),
        _line(15, "train", "xb = xb.to(device, non_blocking=True)", h2d=20),
        _line(16, "step", "out = model(xb)"),
        _line(50, "train", "total = loss_sum.item()", items=2),
    ],
    20,
    "train.py --fixed",
)


def test_lines_are_matched_by_code_and_function_not_by_number():
    d = diff_reports(BEFORE, AFTER)
    found = {
        (x.before.line if x.before else None, x.after.line if x.after else None): (
            x.status,
            x.match,
        )
        for x in d.lines
    }
    assert found == {
        (10, 14): ("matched", "moved"),  # same code, comment aside, two lines down
        (11, 15): ("matched", "edited"),  # .to(device) -> .to(device, non_blocking=True)
        (12, 16): ("matched", "other_function"),  # the same line, now in step()
        (30, None): ("disappeared", None),
        (40, None): ("disappeared", None),
        (None, 50): ("appeared", None),
    }
    assert d.per_step
    moved = next(x for x in d.lines if x.match == "moved")
    # 10 items / 10 steps before, 20 / 20 after: one a step both times
    assert (d.value(moved, "before", "syncs"), d.value(moved, "after", "syncs")) == (1.0, 1.0)
    assert d.delta(None, "syncs") == pytest.approx(1.1 - 2.0)  # 22/20 - 20/10
    assert d.delta(None, "syncs", per_step=False) == 2.0  # 22 - 20 over the whole runs
    # changed: the print line gone (1 a step), the new fetch (0.1 a step); line 30 counted
    # nothing and is left out; the edited copy line moved the same per step
    assert [x.before_line for x in _doc(d).changed()] == [40, None]


def test_diff_writes_json_in_its_schema_html_and_checks_growth(tmp_path, capsys):
    BEFORE.save(tmp_path / "a.json")
    AFTER.save(tmp_path / "b.json")
    args = ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    code = cli.main([*args, "--json", str(tmp_path / "d.json"), "--html", str(tmp_path / "d.html")])
    out = capsys.readouterr()
    assert code == 0
    assert "Lines that changed (per step): 2 of 6" in out.out
    assert "1 line appeared and 1 disappeared" not in out.out
    assert "0 lines appeared and 1 disappeared with no copy, sync or collective" in out.out
    doc = json.loads((tmp_path / "d.json").read_text())
    assert problem(doc, "gpuwatch.diff/1") is None
    assert doc["totals"]["delta"]["syncs"] == pytest.approx(-0.9)
    gone = next(x for x in doc["lines"] if x["before_line"] == 40)
    assert gone["status"] == "disappeared" and gone["before"]["syncs.item"] == 1
    assert gone["after"]["syncs"] == 0 and gone["delta"]["syncs"] == -1
    page = (tmp_path / "d.html").read_text()
    assert "<code>train.py:40</code>" in page and "print(acc.item())" in page
    assert "src=" not in page and "http" not in page.replace("charset", "")  # nothing fetched
    embedded = page.split('id="gpuwatch-diff">')[1].split("</script>")[0]
    assert json.loads(embedded.replace("<\\/", "</")) == doc

    # growth: the total per step fell (passes); a new line syncs 0.1 a step (fails, named)
    assert cli.main([*args, "-q", "--budget", "syncs/step<=0"]) == 0
    assert cli.main([*args, "-q", "--budget", "line:syncs/step<=0,syncs<=1"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "gpuwatch: over budget in growth (line:syncs/step<=0,syncs<=1):",
        "  line:syncs/step<=0: 1 line over it",
        "    0.10 per step (0.10 over)  train.py:50 (train) total = loss_sum.item() (new)",
        # 22 - 20 over the whole runs: +10 on the moved line (twice the steps), +2 new, -10 gone
        "  syncs<=1: 2 (1 over), from",
        "    10  train.py:14 (train) losses.append(loss.item()) # still here, comment changed "
        "(was line 10, train)",
        "     2  train.py:50 (train) total = loss_sum.item() (new)",
    ]
    assert cli.main([*args, "--json", str(tmp_path / "a.json")]) == 2  # never over an input


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def test_a_saved_diff_is_shown_and_written_again_as_the_diff_said_it(tmp_path, capsys):
    # 8 lines changed: more than report's own 5 lines per list, fewer than the diff's 20
    gone = [_line(60 + i, "log", f"print(m{i}.item())", items=10) for i in range(6)]
    _run([*BEFORE.lines, *gone], 10, "train.py").save(tmp_path / "a.json")
    AFTER.save(tmp_path / "b.json")
    d, page, first = tmp_path / "d.json", tmp_path / "d.html", tmp_path / "first.html"
    runs = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert cli.main(["diff", *runs, "--json", str(d), "--html", str(first)]) == 0
    said = capsys.readouterr().out
    assert "Lines that changed (per step): 8 of 12 " in said
    # the runs' reports are not needed: the diff's JSON says it all
    (tmp_path / "a.json").unlink()
    (tmp_path / "b.json").unlink()
    again = tmp_path / "again.json"
    assert cli.main(["report", str(d), "--json", str(again), "--html", str(page)]) == 0
    assert capsys.readouterr().out == said
    assert again.read_bytes() == d.read_bytes()
    assert page.read_bytes() == first.read_bytes()
    # what a diff cannot give, and a damaged one: a line each
    for extra, words in (
        (["--trace", str(tmp_path / "t.json")], "a diff has no Chrome trace"),
        (["--budget", "syncs<=0"], "--budget takes a run, not a diff"),
        (["--what-if"], "--what-if takes a run, not a diff"),
    ):
        assert cli.main(["report", str(d), *extra]) == 2
        assert words in capsys.readouterr().err
    assert cli.main(["report", str(d), str(again)]) == 2
    assert f"{d} is a saved diff: it is shown alone" in capsys.readouterr().err
    # told by its schema, wherever the key is; read once (a pipe can be)
    doc = json.loads(d.read_text())
    d.write_text(json.dumps(doc, sort_keys=True))
    assert cli.main(["report", str(d)]) == 0 and capsys.readouterr().out == said
    read, write = os.pipe()  # NB: <(cat D.json): its writer is there before it is read
    writer = threading.Thread(target=_write_all, args=(write, d.read_bytes()), daemon=True)
    writer.start()
    assert cli.main(["report", f"/dev/fd/{read}"]) == 0 and capsys.readouterr().out == said
    writer.join()
    os.close(read)
    # a run that names the diff's schema in its command is still a run
    _run(BEFORE.lines, 10, "gpuwatch.diff/1").save(tmp_path / "r.json")
    assert cli.main(["report", "-q", str(tmp_path / "r.json")]) == 0
    huge = json.loads(json.dumps(doc).replace('"syncs": 0,', f'"syncs": {10**400},', 1))
    d.write_text(json.dumps(huge))
    assert cli.main(["report", str(d)]) == 2
    assert "number out of range" in capsys.readouterr().err
    doc["lines"][0]["before"] = "many"
    d.write_text(json.dumps(doc))
    assert cli.main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch: error: damaged gpuwatch diff {d}: at lines/0/before: ")
    assert len(err.splitlines()) == 1


def test_report_refuses_to_merge_two_runs_and_points_at_diff(tmp_path, capsys):
    BEFORE.save(tmp_path / "a.json")
    AFTER.save(tmp_path / "b.json")
    assert cli.main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"gpuwatch: error: {tmp_path / 'a.json'} is a single-process run, not a rank of a "
        f"distributed run; to compare two runs: gpuwatch diff {tmp_path / 'a.json'} "
        f"{tmp_path / 'b.json'}\n"
    )
    r0 = Report(command=["ddp.py"], rank=0, world_size=2)
    r1 = Report(command=["other.py"], rank=1, world_size=2)
    r0.save(tmp_path / "r0.json")
    r1.save(tmp_path / "r1.json")
    assert cli.main(["report", str(tmp_path / "r0.json"), str(tmp_path / "r1.json")]) == 2
    assert "are different runs (ddp.py vs other.py); to compare two runs" in capsys.readouterr().err


DEMO = [
    "demos/single_gpu_training.py",
    "--steps",
    "4",
    "--epochs",
    "2",
    "--batch",
    "8",
    "--size",
    "16",
]


@pytest.mark.fake_cuda
@pytest.mark.skipif(FAKE_CUDA_MISSING is not None, reason=str(FAKE_CUDA_MISSING))
def test_demos_budget_naive_fails_fixed_passes_and_their_diff(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    common = [
        "profile",
        "--fake-cuda",
        "-q",
        "--no-gpu-stats",
        "--checkpoint",
        "0",
        "--steps",
        "1:",
    ]
    budget = ["--budget", "syncs/step<=1,h2d.pageable=0"]
    naive, fixed = tmp_path / "naive.json", tmp_path / "fixed.json"
    assert cli.main([*common, *budget, "--json", str(naive), *DEMO, "--variant", "naive"]) == 3
    err = capsys.readouterr().err
    # steps 1-7 profiled (8 steps, the window from the end of step 0): per step a blocking
    # label copy and the mean copy (14), two .cpu() (16, step 0's tail included) and a
    # loss.item() (8): 38 syncs / 7 steps
    assert "  syncs/step<=1: 5.43 per step (4.43 over), from" in err
    assert "1.14 per step  demos/single_gpu_training.py:77 (train_naive) losses.append(" in err
    assert "  h2d.pageable<=0: 21 (21 over), from" in err
    assert json.loads(naive.read_text())["exit_code"] == 0  # the report written as usual
    assert cli.main([*common, *budget, "--json", str(fixed), *DEMO, "--variant", "fixed"]) == 0
    assert capsys.readouterr().err == ""  # -q: within budget is said only without it

    assert cli.main(["diff", str(naive), str(fixed), "--budget", "syncs/step<=0"]) == 0
    out = capsys.readouterr().out
    d = diff_reports(Report.load(naive), Report.load(fixed))
    by_after = {x.after.line: x for x in d.lines if x.after is not None}
    assert by_after[104].match == "edited" and by_after[104].before.line == 71  # yb copy
    assert by_after[103].match == "other_function" and by_after[103].before.line == 70  # xb
    assert d.delta(by_after[104], "syncs") == -1 and d.delta(by_after[103], "h2d.pageable") == -1
    gone = {x.before_line for x in _doc(d).changed() if x.status == "disappeared"}
    assert gone == {36, 77, 78}  # the mean copy, loss.item(), the .cpu() metrics
    totals = next(line for line in out.splitlines() if line.strip().startswith("syncs "))
    assert totals.split() == ["syncs", "5.43", "0.57", "-4.86"]  # 38/7 and 4/7 (4 .item())


# -- library frames per line: the frame whose syncs went from 69 to 0 is the news -------------


def _frame(file: str, line: int, function: str, items: int, copies: int = 0) -> LibraryFrame:
    f = LibraryFrame(file, line, function)
    for _ in range(copies):
        f.add(True, 1024, None)
    for _ in range(items):
        f.add(False, 0, "item")
    return f


TRAINER = "transformers/trainer.py"


def _fit(lineno: int, frames: list[LibraryFrame], steps: int) -> Report:
    items, copies = sum(f.syncs for f in frames), sum(f.copies for f in frames)
    line = _line(lineno, "main", "trainer.train()", items=items, h2d=copies)
    return _run([replace(line, library=tuple(frames))], steps, "train.py")


def test_library_frames_of_a_line_are_compared_frame_by_frame(tmp_path, capsys):
    # before: the NaN filter's isnan().item() 69 times and the log's .item() 10 times, in 10
    # steps; after (the filter turned off, transformers upgraded: the log's line moved from
    # 2410 to 2416): the filter's frame made nothing, the log's the same
    before = _fit(
        31,
        [
            _frame(TRAINER, 2502, "_inner_training_loop", 69),
            _frame(TRAINER, 2410, "_maybe_log_save_evaluate", 10, copies=10),
        ],
        10,
    )
    after = _fit(33, [_frame(TRAINER, 2416, "_maybe_log_save_evaluate", 10, copies=10)], 10)
    d = diff_reports(before, after)
    (line,) = _doc(d).changed()
    assert (line.before_line, line.after_line) == (31, 33)
    frames = {(f.status, f.label) for f in line.library}
    assert frames == {
        ("disappeared", f"{TRAINER}:2502 _inner_training_loop"),
        ("matched", f"{TRAINER}:2416 (was 2410) _maybe_log_save_evaluate"),  # by its function
    }
    (news,) = line.changed_frames()  # the log's frame made the same: not news
    assert news.before_line == 2502
    assert news.delta["syncs"] == -6.9  # per step: 69 / 10 steps, then none

    before.save(tmp_path / "a.json")
    after.save(tmp_path / "b.json")
    args = ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert (
        cli.main([*args, "--json", str(tmp_path / "d.json"), "--html", str(tmp_path / "d.html")])
        == 0
    )
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if "_inner_training_loop" in r)
    assert row.split() == [
        "6.90",
        "→",
        "0",
        "0",  # its copies and bytes: none either side
        "0",
        "B",
        "↳",
        "made",
        "in",
        f"{TRAINER}:2502",
        "_inner_training_loop,",
        "gone",
    ]
    assert "_maybe_log_save_evaluate" not in out  # unchanged frames stay in the JSON
    doc = json.loads((tmp_path / "d.json").read_text())
    assert problem(doc, "gpuwatch.diff/1") is None
    assert doc["lines"][0]["library"] == [
        {
            "status": "disappeared",
            "file": TRAINER,
            "function": "_inner_training_loop",
            "before_line": 2502,
            "after_line": None,
            "before": {"syncs": 6.9, "copies": 0, "bytes": 0},
            "after": {"syncs": 0, "copies": 0, "bytes": 0},
            "delta": {"syncs": -6.9, "copies": 0, "bytes": 0},
        },
        {
            "status": "matched",
            "file": TRAINER,
            "function": "_maybe_log_save_evaluate",
            "before_line": 2410,
            "after_line": 2416,
            "before": {"syncs": 1, "copies": 1, "bytes": 1024},
            "after": {"syncs": 1, "copies": 1, "bytes": 1024},
            "delta": {"syncs": 0, "copies": 0, "bytes": 0},
        },
    ]
    page = (tmp_path / "d.html").read_text()
    assert f"↳ made in {TRAINER}:2502 _inner_training_loop, gone" in page
    assert '<td class="n down">6.90 → 0</td>' in page


def test_syncs_moved_between_frames_of_one_line_make_it_changed():
    # the line's own total is the same (5 a run): which library frame made them is what changed
    before = _fit(7, [_frame(TRAINER, 100, "a", 5)], 1)
    after = _fit(7, [_frame(TRAINER, 200, "b", 5)], 1)
    d = diff_reports(before, after)
    assert d.delta(d.lines[0], "syncs") == 0
    (line,) = _doc(d).changed()
    assert sorted((f.status, f.after_line or f.before_line) for f in line.changed_frames()) == [
        ("appeared", 200),
        ("disappeared", 100),
    ]
