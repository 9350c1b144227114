"""``gpuwatch profile --live`` when the run ends the hard ways: SIGTERM/SIGHUP to gpuwatch, the
live app killed outright, output that would swamp the display, a grandchild holding the pipes,
and simulated GPU stats that must say so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from gpuwatch.analysis import analyze
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import Hello
from gpuwatch.profile.live.session import ChildSession, InMemorySource
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from tests.conftest import plain, read_pty, start_in_pty, wait_until
from tests.live_helpers import copies_report, finished, snapshot_of

LOOP = textwrap.dedent("""
    import os, sys, time, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(shape_env=ShapeEnv()):
        for i in range(10**9):
            torch.randn(16).to("cuda:0")
            if i == 3:  # copies counted: the test may stop it now
                open("pid", "w").write(str(os.getpid()))
            time.sleep(0.02)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it has ended all the same.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _start_live(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, bytearray]:
    (tmp_path / "loop.py").write_text(LOOP)
    proc, master = start_in_pty(
        ["gpuwatch", "profile", "--live", "--demo", "--json", "r.json", "loop.py"], tmp_path
    )
    screen = bytearray()
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline and proc.poll() is None, screen[-2000:]
        screen += read_pty(master)
    # NB: the app's signal handlers are on before it starts the script (on_mount)
    return proc, master, screen


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_live_stops_the_child_writes_the_report_and_restores_the_terminal(
    tmp_path, signum
):
    proc, master, screen = _start_live(tmp_path)
    child = int((tmp_path / "pid").read_text())
    try:
        proc.send_signal(signum)
        deadline = time.monotonic() + 30
        while proc.poll() is None:
            assert time.monotonic() < deadline, screen[-2000:]
            screen += read_pty(master)
        screen += read_pty(master)
    finally:
        proc.kill()
        os.close(master)
    assert proc.returncode == 128 + signum
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["totals"]["h2d"]["count"] > 0
    assert doc["options"]["gpu_stats"] == "demo"
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the script outlived gpuwatch"
        time.sleep(0.05)
    assert b"\x1b[?1049l" in screen  # the alternate screen was left: the terminal is back


@pytest.mark.slow
def test_the_child_ends_with_a_killed_parent_and_writes_the_report_itself(tmp_path):
    proc, master, _ = _start_live(tmp_path)
    child = int((tmp_path / "pid").read_text())
    try:
        proc.kill()  # no handler runs in the live app
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _alive(child) or not (tmp_path / "r.json").exists():
            assert time.monotonic() < deadline, (
                f"the script outlived gpuwatch: alive {_alive(child)}, "
                f"report {(tmp_path / 'r.json').exists()}"
            )
            time.sleep(0.05)
    finally:
        os.close(master)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["error"] == "stopped by SIGTERM"
    assert doc["totals"]["h2d"]["count"] >= 4


def make_app(tmp_path: Path, script: str, **kw) -> LiveApp:
    (tmp_path / "s.py").write_text(textwrap.dedent(script))
    session = ChildSession(
        Target(str(tmp_path / "s.py"), []), ProfileOptions(), interval_s=0.1, cwd=str(tmp_path)
    )
    outputs = [Output("json", str(tmp_path / "r.json"))]
    return LiveApp(
        LiveRun(session, outputs, gpu_stats="demo"),
        Sampler(FakeBackend(gpu_count=2), interval_s=0.2),
        gpu_interval_s=0.2,
        **kw,
    )


def log_text(app: LiveApp) -> str:
    return "\n".join(str(line.text) for line in app.query_one("#log").lines)


@pytest.mark.slow
async def test_a_50_mb_line_of_output_does_not_freeze_the_view(tmp_path):
    app = make_app(
        tmp_path,
        """
        import sys
        sys.stdout.write("x" * 50_000_000 + "\\n")
        print("after the long line", flush=True)
        """,
    )
    began = time.monotonic()
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: app.ended is not None, 60)
        await wait_until(lambda: "after the long line" in log_text(app), 30)
        text = log_text(app)
    assert time.monotonic() - began < 30
    assert "[49,996,000 more bytes of this line not shown]" in text
    assert "after the long line" in text


@pytest.mark.slow
async def test_carriage_return_progress_bars_show_while_they_run(tmp_path):
    app = make_app(
        tmp_path,
        """
        import sys, time
        for i in range(1, 4):
            sys.stderr.write(f"\\rtraining {i * 25}%|")
            sys.stderr.flush()
            time.sleep(0.3)
        open("hold", "w").close()
        while True:
            time.sleep(0.05)
        """,
    )
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: (tmp_path / "hold").exists(), 60)
        # the newest state
        await wait_until(lambda: plain(app.query_one("#progress")).strip() == "training 75%|", 30)
        assert "training" not in log_text(app)  # not a line yet: no newline has come
        app.model.session.kill()
        await wait_until(lambda: app.ended is not None, 30)


def test_progress_text_then_a_newline_becomes_one_log_line():
    import io

    session = ChildSession(Target("x.py", []), ProfileOptions())
    session._read_output(io.BytesIO(b"a\r\nb\r 10%\r 20%\n"), "stderr")  # type: ignore[arg-type]
    drained = session.drain()
    assert drained.lines == [("stderr", "a"), ("stderr", " 20%")]
    assert session.progress() == ""


@pytest.mark.slow
async def test_a_lingering_grandchild_does_not_keep_the_run_running(tmp_path):
    app = make_app(
        tmp_path,
        """
        import subprocess
        # Inherits stdout and stderr, and outlives the script by a minute.
        grandchild = subprocess.Popen(["sleep", "60"])
        open("grandchild.pid", "w").write(str(grandchild.pid))
        print("script done", flush=True)
        """,
    )
    began = time.monotonic()
    try:
        async with app.run_test(size=(120, 40)):
            await wait_until(lambda: app.ended is not None, 30)
            assert app.model.exit_code == 0
        assert time.monotonic() - began < 20
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["partial"] is False
    finally:  # NB: its end closes the pipes our reader threads wait on (the autouse check)
        pid = tmp_path / "grandchild.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGKILL)


def in_memory_app(script: InMemorySource) -> LiveApp:
    """The live view over a script held in memory, with two simulated GPUs (--demo)."""
    return LiveApp(
        LiveRun(script, [], gpu_stats="demo"),
        Sampler(FakeBackend(gpu_count=2), interval_s=0.2),
        gpu_interval_s=0.2,
    )


async def test_demo_stats_are_labelled_simulated_everywhere():
    report = copies_report("s.py", 1, "cuda:0")
    script = InMemorySource(Target("s.py", []))
    script.send(Hello(7, ["s.py"]), snapshot_of(report, 0.1))
    app = in_memory_app(script)
    async with app.run_test(size=(120, 40)):
        # the script ends once the view has sampled its GPU while it ran
        await wait_until(lambda: any(s["gpu"] == 0 for s in app.model.gpu_samples), 20)
        script.send(finished(report))
        script.exit(0)
        await wait_until(lambda: app.ended is not None, 20)
    result = app.model.result()
    assert result.report is not None
    assert result.report.options.gpu_stats == "demo"
    from gpuwatch.output.html import render_html
    from gpuwatch.output.text import gpu_lines

    lines = gpu_lines(result.report)
    assert lines and all("simulated by --demo" in line for line in lines if "busy" in line)
    assert "NVML" not in " ".join(lines)
    assert "simulated by --demo, not measured" in render_html(result.report, analyze(result.report))


async def test_a_script_that_uses_no_gpu_is_charged_with_none():
    report = copies_report("s.py", 1, device=None)
    script = InMemorySource(Target("s.py", []))
    script.send(Hello(7, ["s.py"]), snapshot_of(report, 0.1))
    app = in_memory_app(script)
    async with app.run_test(size=(120, 40)):
        # the view samples both GPUs while it runs: none of them is the script's
        await wait_until(lambda: len(app.model.gpu_samples) >= 2, 20)
        script.send(finished(report))
        script.exit(0)
        await wait_until(lambda: app.ended is not None, 20)
    report = app.model.result().report
    assert report is not None and report.gpu_samples == []
    from gpuwatch.output.text import gpu_lines

    assert gpu_lines(report) == [
        "GPU: no CUDA device was used, so no GPU's load is charged to this script"
    ]
