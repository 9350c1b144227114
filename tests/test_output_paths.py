"""Where the reports go, as a user expects: devices, FIFOs and /dev/stdout written through (never
replaced by a regular file), a symlink kept a symlink, a full disk said in one line, and paths
fixed when gpuwatch starts, whatever directory the script moves to."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading

import pytest

from gpuwatch.output.write import Output, check_outputs, streams_through, write_reports
from profilers import Report
from tests.helpers import gpuwatch_here

# Two copies to a (fake) GPU of 16 floats, 64 bytes each: a report with exact counts.
SCRIPT = """\
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
print("the script's own line", flush=True)
with FakeTensorMode(shape_env=ShapeEnv()):
    for _ in range(2):
        torch.randn(16).to("cuda:0")
"""


def _h2d(doc: dict) -> tuple[int, int]:
    return doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]


def test_dev_null_for_every_report_stays_the_device(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    before = os.stat("/dev/null")
    done = gpuwatch_here(
        ["profile", "--json", "/dev/null", "--html", "/dev/null", "--trace", "/dev/null", "s.py"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino  # the same device node, not a file renamed over it
    assert done.stderr.count("gpuwatch: wrote /dev/null") == 3


def test_dev_full_says_no_space_in_one_line_and_exits_2(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = gpuwatch_here(
        ["profile", "-q", "--json", "/dev/full", "--html", "r.html", "s.py"], tmp_path
    )
    assert done.returncode == 2
    assert done.stderr == (
        "gpuwatch: error: cannot write the report to /dev/full: No space left on device\n"
    )
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")  # the other one is out
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.slow
def test_trace_to_dev_stdout_follows_the_scripts_output_in_the_same_file(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    with open(tmp_path / "out.txt", "w") as out:  # the shell's `> out.txt`
        done = subprocess.run(
            ["gpuwatch", "profile", "-q", "--json", "/dev/stdout", "s.py"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out.txt").read_text()
    first, _, rest = text.partition("\n")
    assert first == "the script's own line"  # appended after it, never truncated over it
    assert _h2d(json.loads(rest)) == (2, 128)


def test_a_symlink_stays_a_symlink_and_its_target_gets_the_report(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "r.json").write_text("the old report")
    (tmp_path / "r.json").symlink_to("keep/r.json")
    (tmp_path / "new.json").symlink_to("keep/new.json")  # a link to where the report should go
    done = gpuwatch_here(["profile", "-q", "--json", "r.json", "-o", "new.json", "s.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("r.json", "new.json"):
        assert os.readlink(tmp_path / name) == f"keep/{name}"
        assert _h2d(json.loads((tmp_path / "keep" / name).read_text())) == (2, 128)
    assert sorted(p.name for p in (tmp_path / "keep").iterdir()) == ["new.json", "r.json"]


def test_a_fifo_gets_the_report_through_and_stays_a_fifo(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    os.mkfifo(tmp_path / "pipe")
    got: list[bytes] = []
    # NB: a daemon thread: gpuwatch waits for the script's non-daemon threads before it writes.
    reader = threading.Thread(
        target=lambda: got.append((tmp_path / "pipe").read_bytes()), daemon=True
    )
    reader.start()
    done = gpuwatch_here(["profile", "-q", "--json", "pipe", "s.py"], tmp_path)
    reader.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    assert _h2d(json.loads(got[0])) == (2, 128)


def test_a_fifo_nobody_reads_fails_in_one_line_within_the_wait(tmp_path, monkeypatch):
    import gpuwatch.output.write as write

    monkeypatch.setattr(write, "FIFO_WAIT_S", 0.2)
    os.mkfifo(tmp_path / "pipe")
    results = write_reports(Report(command=["x.py"]), [Output("json", str(tmp_path / "pipe"))])
    assert results == [
        (False, f"cannot write the report to {tmp_path}/pipe: no process is reading the FIFO")
    ]


def test_what_streams_through_and_what_is_replaced(tmp_path):
    (tmp_path / "file.json").write_text("{}")
    (tmp_path / "link.json").symlink_to("file.json")
    (tmp_path / "to_stdout").symlink_to("/dev/stdout")
    assert [
        streams_through(p)
        for p in (
            "/dev/null",
            "/proc/self/fd/1",
            str(tmp_path / "to_stdout"),
            str(tmp_path / "file.json"),
            str(tmp_path / "link.json"),
            str(tmp_path / "missing.json"),
        )
    ] == [True, True, True, False, False, False]
    # two reports into one device are allowed (nothing is replaced); into one file, not
    check_outputs([Output("json", "/dev/null"), Output("html", "/dev/null")])


def test_a_script_that_changes_directory_cannot_move_the_reports(tmp_path):
    # Hydra's default: the script runs in an outputs folder of its own, where it keeps a
    # r.json of its own; then it removes that folder.
    (tmp_path / "s.py").write_text(
        SCRIPT
        + 'import os\nos.makedirs("outputs/run1")\nos.chdir("outputs/run1")\n'
        + 'open("r.json", "w").write("the script\'s own r.json")\n'
        + 'os.makedirs("tmp")\nos.chdir("tmp")\nos.rmdir("../tmp")\n'
    )
    done = gpuwatch_here(["profile", "--json", "r.json", "s.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gpuwatch: wrote r.json\n" in done.stderr
    assert _h2d(json.loads((tmp_path / "r.json").read_text())) == (2, 128)
    assert (tmp_path / "outputs" / "run1" / "r.json").read_text() == "the script's own r.json"


def test_outputs_are_absolute_from_the_start_and_say_what_the_user_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = Output("json", "r.json")
    monkeypatch.chdir("/")
    assert (out.path, out.where) == ("r.json", f"{tmp_path}/r.json")
    results = write_reports(Report(command=["x.py"]), [out])
    assert results == [(True, "wrote r.json")] and (tmp_path / "r.json").exists()


@pytest.mark.parametrize("path", ["/dev/null", "/dev/full"])
def test_devices_are_never_refused_before_the_run(path):
    check_outputs([Output("json", path)])  # no probe file is made in /dev, nothing raises
