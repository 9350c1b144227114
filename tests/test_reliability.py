"""Whatever happens to the run, the user gets a report, their program behaves as without
gpuwatch, and none of their files is touched: the ways real jobs end (signals, os._exit, the OOM
killer, threads still running), scripts that change the interpreter around them, and output
paths that must not be written.

Children are started with SIGINT, SIGTERM and SIGHUP at their defaults (``default_signals``), so
these tests hold however the suite itself was started."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.output.load import problem
from tests.helpers import default_signals, gpuwatch_here, run

FAKE = textwrap.dedent("""
    import os, sys, threading, time, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
""")

# A loop of fake-CUDA copies (16 floats = 64 bytes each) that says when it is running.
LOOP = FAKE + textwrap.dedent("""
    with FakeTensorMode(shape_env=ShapeEnv()):
        for i in range(10**9):
            torch.randn(16).to("cuda:0")
            if i == 3:
                print("running", flush=True)
            time.sleep(0.01)
""")


def start(args: list[str], cwd: Path, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=kw.pop("preexec_fn", default_signals),
        **kw,
    )


def wait_for_line(proc: subprocess.Popen[str], text: str, timeout_s: float = 60) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while text not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]


# -- the ways a run ends --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_leave_every_report_and_exit_128_plus_the_signal(tmp_path, signum):
    (tmp_path / "loop.py").write_text(LOOP)
    proc = start(
        ["gpuwatch", "profile", "-q", "--json", "r.json", "--html", "r.html", "loop.py"], tmp_path
    )
    wait_for_line(proc, "running")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    doc = json.loads((tmp_path / "r.json").read_text())
    name = signal.Signals(signum).name
    assert doc["partial"] is True and doc["exit_code"] == 128 + signum
    assert doc["error"] == f"stopped by {name}"
    assert doc["totals"]["h2d"]["count"] >= 4 and doc["totals"]["h2d"]["bytes"] % 64 == 0
    assert "did not finish" in (tmp_path / "r.html").read_text()
    assert problem(doc) is None  # what the CLI writes holds to the published schema


@pytest.mark.slow
def test_sigterm_that_lands_in_a_weakref_callback_still_ends_the_script(tmp_path):
    # Python runs a signal's handler wherever the main thread is; in a weakref callback (torch
    # and the fake GPU free tensors there) the interpreter drops what the handler raises.
    # Without gpuwatch SIGTERM would have ended the script: under it, it must end it too.
    (tmp_path / "s.py").write_text(
        FAKE
        + textwrap.dedent("""
        import signal, weakref
        class Box: pass
        def freed(_):
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs inside this callback
            sum(range(10))
        with FakeTensorMode(shape_env=ShapeEnv()):
            torch.randn(16).to("cuda:0")
            box = Box(); ref = weakref.ref(box, freed); del box
            for i in range(300):
                time.sleep(0.01)
            torch.randn(16).to("cuda:0")
            print("the script went on")
        """)
    )
    done = run(["gpuwatch", "profile", "-q", "--json", "r.json", "s.py"], tmp_path, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "the script went on" not in done.stdout
    assert "Exception ignored" not in done.stderr and "Terminated" not in done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["error"] == "stopped by SIGTERM"
    assert (doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]) == (1, 64)


@pytest.mark.slow
def test_sigterm_dropped_in_the_scripts_last_weakref_callback_is_not_lost(tmp_path):
    # The script ends well before the signal is sent again (10 ms later): the signal must still
    # count (gpuwatch exits 143, as python would have), never die with a daemon thread at exit.
    (tmp_path / "s.py").write_text(
        textwrap.dedent("""
        import os, signal, weakref
        class Box: pass
        def freed(_):
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs inside this callback
            sum(range(10))
        box = Box(); ref = weakref.ref(box, freed); del box
        """)
    )
    for _ in range(3):  # without the fix most tries exit 0
        done = run(["gpuwatch", "profile", "-q", "--json", "r.json", "s.py"], tmp_path, timeout=60)
        assert done.returncode == 128 + signal.SIGTERM, done.stderr
        assert "Terminated" not in done.stderr
        assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 0  # it did end


@pytest.mark.slow
def test_ctrl_c_twice_never_loses_the_report(tmp_path):
    # 5 copies of 64 bytes, then a wait with no op: the counts up to Ctrl-C are exact.
    (tmp_path / "loop.py").write_text(
        FAKE
        + textwrap.dedent("""
        with FakeTensorMode(shape_env=ShapeEnv()):
            for _ in range(5):
                torch.randn(16).to("cuda:0")
        print("running", flush=True)
        while True:
            time.sleep(0.05)
    """)
    )
    proc = start(
        ["gpuwatch", "profile", "-q", "--json", "r.json", "--html", "r.html", "loop.py"], tmp_path
    )
    wait_for_line(proc, "running")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)  # the second press lands while the first is handled or the report written
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (
        doc["partial"] is True and doc["exit_code"] == 130 and doc["error"] == "KeyboardInterrupt"
    )
    assert (doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]) == (5, 5 * 64)
    assert doc["totals"]["syncs"] == {"count": 5, "by_cause": {"copy_to_device": 5}}
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


def _h2d_in(path: Path) -> int:
    """Copies to the GPU in the report at ``path`` so far (-1: none there yet)."""
    try:
        return int(json.loads(path.read_text())["totals"]["h2d"]["count"])
    except (OSError, ValueError, KeyError):
        return -1


@pytest.mark.slow
def test_a_sigkilled_run_leaves_its_last_checkpoint(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    proc = start(
        ["gpuwatch", "profile", "-q", "--checkpoint", "1", "--json", "r.json", "loop.py"], tmp_path
    )
    wait_for_line(proc, "running")
    # A checkpoint every second: one written after the loop's first copies (a loaded machine
    # can take longer than a second to reach them, and the first checkpoint then has none).
    deadline = time.monotonic() + 30
    while _h2d_in(tmp_path / "r.json") < 4:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.kill()  # as the OOM killer does: no handler runs
    proc.communicate(timeout=30)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["exit_code"] == 137
    assert "last checkpoint" in doc["error"] and doc["totals"]["h2d"]["count"] >= 4


@pytest.mark.slow
def test_os_exit_in_the_script_still_writes_the_report(tmp_path):
    (tmp_path / "quit.py").write_text(
        FAKE
        + textwrap.dedent("""
        with FakeTensorMode(shape_env=ShapeEnv()):
            for _ in range(5):
                torch.randn(16).to("cuda:0")
        sys.stdout.flush()
        os._exit(3)
    """)
    )
    done = run(["gpuwatch", "profile", "--json", "r.json", "quit.py"], tmp_path)
    assert done.returncode == 3, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["exit_code"] == 3 and doc["error"] == "the script called os._exit(3)"
    assert problem(doc) is None
    assert doc["totals"]["h2d"]["count"] == 5  # 5 copies of 64 bytes
    assert doc["totals"]["h2d"]["bytes"] == 5 * 64
    assert "Copies" in done.stderr  # the summary was printed too


def test_work_in_non_daemon_threads_after_main_returns_is_counted(tmp_path):
    (tmp_path / "threads.py").write_text(
        FAKE
        + textwrap.dedent("""
        from concurrent.futures import ThreadPoolExecutor

        def late(n):
            time.sleep(0.3)  # still running when the main module returns
            with FakeTensorMode(shape_env=ShapeEnv()):
                for _ in range(n):
                    torch.randn(16).to("cuda:0")

        threading.Thread(target=late, args=(5,)).start()
        pool = ThreadPoolExecutor(1)  # never shut down: Python still runs its queued work
        pool.submit(late, 2)
        print("main returns")
    """)
    )
    done = gpuwatch_here(["profile", "-q", "--json", "r.json", "threads.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert not doc["partial"]
    # 5 copies from the thread, 2 from the pool's worker, 64 bytes each
    assert (doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]) == (7, 7 * 64)


@pytest.mark.slow
def test_sigint_ignored_at_start_stays_ignored_for_the_script(tmp_path):
    (tmp_path / "probe.py").write_text(
        "import signal\nprint(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )

    def ignore_sigint() -> None:
        default_signals()
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = start(["gpuwatch", "profile", "-q", "probe.py"], tmp_path, preexec_fn=ignore_sigint)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "True\n"), err


# -- scripts that change the interpreter around them -----------------------------------------------


def test_a_script_that_clears_sys_path_still_gets_every_report(tmp_path):
    (tmp_path / "paths.py").write_text(
        FAKE
        + textwrap.dedent("""
        with FakeTensorMode(shape_env=ShapeEnv()):
            torch.randn(16).to("cuda:0")
        sys.path.clear()
        sys.path = ["/nowhere"]
    """)
    )
    done = gpuwatch_here(
        ["profile", "-q", "--json", "r.json", "--html", "r.html", "paths.py"], tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["totals"]["h2d"]["count"] == 1
    assert "plotly" in (tmp_path / "r.html").read_text()[:200_000].lower()


@pytest.mark.slow
def test_names_and_arguments_that_are_not_utf8(tmp_path):
    name = os.fsencode(tmp_path) + b"/caf\xe9.py"
    Path(os.fsdecode(name)).write_text("import sys\nprint(len(sys.argv[1]))\n")
    done = subprocess.run(
        [b"gpuwatch", b"profile", b"-q", b"--json", b"r.json", b"--html", b"r.html", name, b"\xff"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"1\n"  # the script saw its argument as Python would have
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["command"][0].endswith("caf\\xe9.py") and doc["command"][1] == "\\xff"
    assert "caf\\xe9.py" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_dash_m_whose_package_raises_shows_the_users_traceback(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        FAKE
        + textwrap.dedent("""
        with FakeTensorMode(shape_env=ShapeEnv()):
            torch.randn(16).to("cuda:0")
        raise RuntimeError("boom in the package")
    """)
    )
    (pkg / "mod.py").write_text("print('never')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # as python -m finds packages in the cwd
    monkeypatch.delitem(sys.modules, "pkg", raising=False)
    done = gpuwatch_here(["profile", "-q", "--json", "r.json", "-m", "pkg.mod"], tmp_path)
    assert done.returncode == 1
    assert "RuntimeError: boom in the package" in done.stderr
    assert "pkg/__init__.py" in done.stderr and "gpuwatch" not in done.stderr.split("\n")[1]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["totals"]["h2d"]["count"] == 1  # counted in __init__


def test_the_profiler_never_raises_into_user_code():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    import profilers

    with profilers.profile() as prof, FakeTensorMode(shape_env=ShapeEnv()):
        idx = torch.nonzero(torch.randn(8))  # a size only the values decide (u0)
        moved = idx.to("cuda:0")  # its bytes cannot be computed: the profiler must not raise
        torch.randn(4).to("cuda:0")
    assert moved.device.type == "cuda" and str(moved.shape[0]).startswith("u")
    report = prof.report()
    # the copy of symbolic size is counted, its bytes said unknown (never an error); the other
    # copy counts its 4 floats
    assert report.internal_errors == {}
    assert report.totals.h2d.count == 2 and report.totals.h2d.unknown_bytes == 1
    assert report.totals.h2d.bytes == 16
    from gpuwatch.output.load import problem

    assert problem(report.to_dict()) is None


# -- outputs: never over the user's files, always checked first -------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--html", "s.py", "s.py"], "refusing to write the HTML report to s.py"),
        (["--json", "./s.py", "s.py"], "refusing to write the JSON report to ./s.py"),
        (["--json", "r.out", "--html", "r.out", "s.py"], "r.out is given twice"),
        (["--json", "", "s.py"], "--json needs a file name"),
        (["--json", "/proc/x.json", "s.py"], "cannot write the report to /proc/x.json"),
    ],
)
def test_outputs_that_would_destroy_or_cannot_be_written_are_refused_first(
    tmp_path, monkeypatch, capsys, args, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("open('ran', 'w').close()\n")
    assert cli.main(["profile", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch: error: {message}") and err.count("\n") == 1
    assert (tmp_path / "s.py").read_text() == "open('ran', 'w').close()\n"
    assert not (tmp_path / "ran").exists()  # refused before anything ran


def test_report_refuses_to_overwrite_its_input(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text("{}")
    assert cli.main(["report", "x.json", "--html", "x.json"]) == 2
    assert "an input of this run" in capsys.readouterr().err
    assert (tmp_path / "x.json").read_text() == "{}"


def test_a_failing_renderer_leaves_the_old_file_and_writes_the_rest(tmp_path, monkeypatch):
    from gpuwatch.analysis import analyze
    from gpuwatch.output import html
    from gpuwatch.output.write import Output, write_reports
    from profilers import Report

    (tmp_path / "r.html").write_text("the previous report")

    def broken(report: Report, findings: object = None) -> str:
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(html, "render_html", broken)
    report = Report(command=["x.py"])
    results = write_reports(
        report,
        [Output("html", str(tmp_path / "r.html")), Output("json", str(tmp_path / "r.json"))],
        analyze(report),
    )
    assert results[0] == (False, f"could not render {tmp_path}/r.html: RuntimeError: renderer bug")
    assert results[1] == (True, f"wrote {tmp_path}/r.json")
    assert (tmp_path / "r.html").read_text() == "the previous report"
    assert json.loads((tmp_path / "r.json").read_text())["command"] == ["x.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]  # no temp left


def test_atomic_write_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    from profilers.report import write_text_atomic

    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, 0o640)

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    monkeypatch.undo()
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


# -- numbers with limits -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["top", "--interval", "inf"], "must be between 0.1 and 3600 seconds, not inf"),
        (["top", "--interval", "nan"], "must be between 0.1 and 3600 seconds, not nan"),
        (["top", "--demo", "--demo-gpus", "1000"], "must be from 1 to 64, not 1,000"),
        (
            ["profile", "--timeline-capacity", str(10**21), "s.py"],
            "must be from 0 to 10,000,000",
        ),
        (["profile", "--gpu-interval", "inf", "s.py"], "must be between 0.1 and 3600"),
        (["profile", "--checkpoint", "-1", "s.py"], "must be 0 (off) or 1 to 86400 seconds"),
    ],
)
def test_numbers_out_of_range_get_one_line_and_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_ops_run_by_the_test_process_reach_no_leftover_profiler():
    import profilers.patches

    assert profilers.registry.ACTIVE is None and os._exit.__module__ in ("posix", "os", "nt")
    assert sys.path  # nothing above left the interpreter changed


def test_the_scripts_own_share_of_a_gpu_is_shown_beside_the_devices():
    from gpuwatch.monitor.gpu_timeline import sample_row
    from gpuwatch.monitor.nvml.samples import GpuSample, ProcessSample
    from gpuwatch.output.text import gpu_lines
    from profilers import Report, RunOptions

    def p(pid: int, sm: int | None) -> ProcessSample:
        return ProcessSample(pid, 0, "python", None, None, "compute", None, sm, None, None)

    g = GpuSample(0, "H100", "GPU-1", None, gpu_util_pct=90, memory_used_bytes=2 * 1024**3)
    rows = [
        sample_row(0.5, dataclasses.replace(g, processes=(p(10, 30), p(11, 5), p(99, 55)))),
        sample_row(1.0, dataclasses.replace(g, processes=(p(10, 20), p(99, 70)))),
    ]
    mine = [
        sample_row(r["t"], dataclasses.replace(g, processes=procs), {10, 11})
        for r, procs in zip(
            rows, [(p(10, 30), p(11, 5), p(99, 55)), (p(10, 20), p(99, 70))], strict=True
        )
    ]
    assert [r["script_sm_util_pct"] for r in mine] == [
        35,
        20,
    ]  # 30 + 5, then 20; pid 99 is not ours
    assert rows[0]["script_sm_util_pct"] is None  # no pids given: nothing is the script's
    report = Report(
        devices=[{"device": "cuda:0"}], gpu_samples=mine, options=RunOptions(gpu_stats="NVML")
    )
    # (35 + 20) / 2 = 27.5, shown as 28
    assert gpu_lines(report) == [
        "GPU 0: busy 90% of the run (mean NVML utilisation), memory peak 2.0 GiB; "
        "this script's processes: 28% of its SMs"
    ]


def test_waiting_for_the_scripts_threads_leaves_this_processs_pools_working():
    from concurrent.futures import ThreadPoolExecutor

    from gpuwatch.profile.runner import wait_for_threads

    pool = ThreadPoolExecutor(1)
    pool.submit(time.sleep, 0.05)
    wait_for_threads()  # runs the pools' exit callbacks, as the interpreter would
    with ThreadPoolExecutor(1) as again:  # a pool made afterwards still takes work
        assert again.submit(lambda: 7).result(timeout=10) == 7


def test_an_op_the_profiler_fails_on_runs_and_is_tallied_in_the_report():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import profilers

    def broken(t: torch.Tensor) -> bool:
        raise RuntimeError("cannot tell\nsecond line")

    with profilers.profile(is_pinned=broken) as prof, FakeTensorMode():
        moved = [torch.randn(4).to("cuda:0") for _ in range(3)]
    assert all(m.device.type == "cuda" for m in moved)  # the ops ran as they would have
    doc = prof.report().to_dict()
    # three copies the rule could not classify: one entry, the first error's first line
    assert doc["internal_errors"] == {
        "_to_copy.default": {"count": 3, "error": "RuntimeError: cannot tell"}
    }
    assert doc["totals"]["h2d"]["count"] == 0


def test_a_summary_that_fails_to_render_costs_one_line_after_the_files(
    tmp_path, monkeypatch, capsys
):
    from gpuwatch.output import deliver, text
    from gpuwatch.output.write import Output
    from profilers import Report

    def broken(*args: object, **kw: object) -> object:
        raise KeyError("rendering bug")

    monkeypatch.setattr(text, "summary", broken)
    wanted = [Output("json", str(tmp_path / "r.json"))]
    failed = deliver.deliver(Report(command=["x.py"]), wanted, top=5, quiet=False)
    err = capsys.readouterr().err
    assert failed is True
    assert json.loads((tmp_path / "r.json").read_text())["command"] == ["x.py"]
    assert f"gpuwatch: wrote {tmp_path}/r.json" in err
    assert (
        "gpuwatch: error: could not print the summary (KeyError: 'rendering bug'); the report's "
        "files are written"
    ) in err
    assert "Traceback" not in err


def test_an_analysis_that_fails_costs_the_summary_and_html_never_the_json(
    tmp_path, monkeypatch, capsys
):
    from gpuwatch.analysis import profile as analysis
    from gpuwatch.output import deliver
    from gpuwatch.output.write import Output
    from profilers import Report

    def broken(report: Report) -> object:
        raise RuntimeError("analysis bug")

    monkeypatch.setattr(deliver, "analyze", broken)
    monkeypatch.setattr(analysis, "analyze_run", broken)
    wanted = [Output("json", str(tmp_path / "r.json")), Output("html", str(tmp_path / "r.html"))]
    failed = deliver.deliver(Report(command=["x.py"]), wanted, top=5, quiet=False)
    err = capsys.readouterr().err
    assert failed is True
    assert json.loads((tmp_path / "r.json").read_text())["command"] == ["x.py"]
    assert f"gpuwatch: wrote {tmp_path}/r.json" in err
    assert f"could not render {tmp_path}/r.html: RuntimeError: analysis bug" in err
    assert "gpuwatch: error: could not analyse the run (RuntimeError: analysis bug)" in err
    assert not (tmp_path / "r.html").exists() and "Traceback" not in err
