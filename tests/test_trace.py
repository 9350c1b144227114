"""``--trace``: the run as a Chrome trace-event file (Perfetto, chrome://tracing), its events
exactly the workload's copies and syncs, its size bounded by the timeline's capacity."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest

from gpuwatch.cli import main as cli

SCRIPT = textwrap.dedent("""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(shape_env=ShapeEnv()):
        w = torch.randn(64, 64).to("cuda:0")
        for step in range(12):
            x = torch.randn(32, 64).to("cuda:0", non_blocking=True)
            loss = (x @ w).sum().item()
""")
# lines of SCRIPT (1-based after dedent, the first line is empty)
LINE_W, LINE_X, LINE_ITEM = 6, 8, 9


def profile(tmp_path, monkeypatch, capfd, *args: str) -> dict:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    assert cli.main(["profile", "-q", "--no-gpu-stats", *args, "train.py"]) == 0, capfd.readouterr()
    return json.loads((tmp_path / "t.json").read_text())


def test_trace_events_are_exactly_the_copies_and_syncs(tmp_path, monkeypatch, capfd):
    doc = profile(tmp_path, monkeypatch, capfd, "--trace", "t.json", "--json", "r.json")
    events = doc["traceEvents"]
    copies = [e for e in events if e.get("cat") == "copy"]
    syncs = [e for e in events if e.get("cat") == "sync"]
    # 1 + 12 copies to the GPU (w: 64*64*4 = 16384 bytes; x: 32*64*4 = 8192 bytes each), 12
    # .item() copies back (4 bytes each); syncs: w's blocking copy and the 12 .item() calls
    # (x's copies are non_blocking: no sync).
    assert Counter((e["args"]["direction"], e["args"]["bytes"]) for e in copies) == {
        ("h2d", 16384): 1,
        ("h2d", 8192): 12,
        ("d2h", 4): 12,
    }
    assert Counter(e["args"]["line"] for e in copies) == {
        f"train.py:{LINE_W}": 1,
        f"train.py:{LINE_X}": 12,
        f"train.py:{LINE_ITEM}": 12,
    }
    x_copies = [e for e in copies if e["args"]["line"] == f"train.py:{LINE_X}"]
    assert all(e["args"]["non_blocking"] and not e["args"]["pinned"] for e in x_copies)
    assert Counter((e["args"]["cause"], e["args"]["line"]) for e in syncs) == {
        ("copy_to_device", f"train.py:{LINE_W}"): 1,
        ("item", f"train.py:{LINE_ITEM}"): 12,
    }
    assert all(e["ph"] == "i" and e["ts"] >= 0 for e in copies + syncs)
    assert [e["ts"] for e in copies] == sorted(e["ts"] for e in copies)
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["events_dropped"] == 0
    # The same file from the saved report (gpuwatch report r.json --trace).
    assert cli.main(["report", "r.json", "--trace", "again.json"]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["traceEvents"] == events


def test_the_trace_is_bounded_by_the_timeline(tmp_path, monkeypatch, capfd):
    doc = profile(tmp_path, monkeypatch, capfd, "--trace", "t.json", "--timeline-capacity", "5")
    kept = [e for e in doc["traceEvents"] if e.get("cat") in ("copy", "sync")]
    # 25 events in all (w, then per step x and .item()); the newest 5 are item, x, item, x, item:
    # three .item() (a copy and a sync each) and two copies of x: 3 * 2 + 2 = 8 trace events.
    assert (doc["otherData"]["events_recorded"], doc["otherData"]["events_dropped"]) == (25, 20)
    assert Counter(e["cat"] for e in kept) == {"copy": 5, "sync": 3}


def test_trace_is_not_taken_for_trace_syncs(tmp_path, monkeypatch, capfd):
    doc = profile(tmp_path, monkeypatch, capfd, "--trace", "t.json", "--json", "r.json")
    options = json.loads((tmp_path / "r.json").read_text())["options"]
    assert options["trace_syncs"] is False and doc["traceEvents"]
    with pytest.raises(SystemExit) as exc:
        cli.main(["profile", "--trace-s", "train.py"])  # no prefix matching, ever
    assert exc.value.code == 2
    assert "unrecognized arguments: --trace-s" in capfd.readouterr().err


def test_gpu_samples_become_counter_tracks():
    from gpuwatch.output.trace import trace_events
    from profilers import Report

    report = Report(
        gpu_samples=[
            {"t": 0.5, "gpu": 0, "gpu_util_pct": 40, "memory_used_bytes": 1024},
            {"t": 1.0, "gpu": 0, "gpu_util_pct": None, "memory_used_bytes": 2048},
        ]
    )
    counters = [e for e in trace_events(report) if e["ph"] == "C"]
    assert counters == [
        {
            "ph": "C",
            "pid": 1,
            "ts": 500000.0,
            "cat": "gpu",
            "name": "GPU 0",
            "args": {"gpu_util_pct": 40, "memory_used_bytes": 1024},
        },
        {
            "ph": "C",
            "pid": 1,
            "ts": 1000000.0,
            "cat": "gpu",
            "name": "GPU 0",
            "args": {"memory_used_bytes": 2048},
        },
    ]  # a value NVML did not report is left out, never drawn as 0


def test_dash_o_takes_the_kind_from_the_ending_and_dash_q_is_quiet(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    code = cli.main(
        [
            "profile",
            "-q",
            "--no-gpu-stats",
            "-o",
            "r.json",
            "-o",
            "r.html",
            "-o",
            "t.trace.json",
            "train.py",
        ]
    )
    out, err = capfd.readouterr()
    assert (code, out, err) == (0, "", "")  # -q: no summary, no "wrote" lines
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "gpuwatch.profile/1"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert "traceEvents" in json.loads((tmp_path / "t.trace.json").read_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "r.txt"], "-o r.txt: the file name says no report kind"),
        (
            ["-o", "r.json", "--json", "r.json"],
            "r.json is given twice for the JSON report (-o or --json): give it once",
        ),
        (["-o", "r.json", "--html", "r.json"], "r.json is given twice (--html and --json)"),
    ],
)
def test_dash_o_refusals_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    assert cli.main(["profile", *args, "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch: error: {message}") and err.count("\n") == 1


def test_steps_are_slices_on_their_own_track(tmp_path, monkeypatch):
    import torch

    import profilers
    from gpuwatch.output.trace import TRACKS, render_trace

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profilers.profile() as prof:
        for _ in range(4):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    report = profilers.Report.from_dict(json.loads(prof.report().to_json()))  # as saved
    doc = json.loads(render_trace(report))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = [e for e in events if e.get("cat") == "step"]
    assert [e["name"] for e in steps] == ["step 0", "step 1", "step 2", "step 3"]
    assert all(e["ph"] == "X" and e["tid"] == TRACKS["step"] and e["dur"] > 0 for e in steps)
    # each slice starts where the one before ended
    assert all(
        b["ts"] == pytest.approx(a["ts"] + a["dur"]) for a, b in zip(steps, steps[1:], strict=False)
    )
