"""gpuwatch profile --live: the app against a real child process running a CPU script whose
fake CUDA tensors make copies and syncs in a loop."""

from __future__ import annotations

import io
import json
import os
import textwrap
from pathlib import Path

import pytest

from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import Done, Hello, ProtocolError, decode, encode
from gpuwatch.profile.live.session import ChildSession, InMemorySource
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from gpuwatch.ui.screens import ConfirmScreen, StackScreen, SummaryScreen
from gpuwatch.ui.widgets import GpuCard, HotLinesTable
from tests.conftest import plain, read_pty, start_in_pty, wait_until
from tests.live_helpers import copies_report, finished, snapshot_of

LOOP = textwrap.dedent("""
    import os, signal, sys, time, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    steps = int(sys.argv[1])
    with FakeTensorMode(shape_env=ShapeEnv()):
        for i in range(steps if steps >= 0 else 10**9):
            torch.randn(16, 16).to("cuda:0")  # 16*16*4 = 1024 bytes
            torch.randn(4).to("cuda:0").sum().item()
            print(f"step {i}", flush=True)
            time.sleep(0.01)
    if len(sys.argv) > 2 and sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if len(sys.argv) > 2 and sys.argv[2] == "chatty":
        for j in range(20000):
            print("x" * 80, j)
""")


def make_app(tmp_path: Path, *args: str, sampler=None, **kw) -> LiveApp:
    (tmp_path / "loop.py").write_text(LOOP)
    session = ChildSession(
        Target(str(tmp_path / "loop.py"), list(args)),
        ProfileOptions(),
        interval_s=0.1,
        cwd=str(tmp_path),
    )
    if sampler is None and "no_gpu_reason" not in kw:
        sampler = Sampler(FakeBackend(gpu_count=2), interval_s=0.2)
    outputs = [Output("json", str(tmp_path / "run.json"))]
    gpu_stats = sampler.source if sampler is not None else kw["no_gpu_reason"]
    return LiveApp(LiveRun(session, outputs, gpu_stats), sampler, gpu_interval_s=0.2, **kw)


@pytest.mark.slow
async def test_counters_move_while_it_runs_then_the_summary_and_report(tmp_path):
    app = make_app(tmp_path, "60")
    async with app.run_test(size=(120, 40)):
        await wait_until(
            lambda: (
                app.model.snapshots_seen >= 2 and app.model.last_snapshot.totals["h2d"]["count"] > 0
            ),
            30,
        )
        first = app.model.last_snapshot.totals["h2d"]["count"]
        await wait_until(lambda: app.model.last_snapshot.totals["h2d"]["count"] > first, 30)
        assert app.model.exit_code is None  # seen moving while the script runs
        table = app.query_one(HotLinesTable)
        assert table.lines and table.lines[0]["file"].endswith("loop.py")
        await wait_until(
            lambda: (
                isinstance(app.screen, SummaryScreen)
                and bool(app.screen.query("#summary"))
                and "Top lines by syncs" in plain(app.screen.query_one("#summary"))
            ),
            60,
        )
        assert app.model.exit_code == 0
        summary = plain(app.screen.query_one("#summary"))
        assert "Top lines by syncs" in summary and "loop.py:9" in summary
        assert "step 59" in "\n".join(str(line.text) for line in app.query_one("#log").lines)
        # the script only used cuda:0, so only that card is shown
        assert [c.index for c in app.query(GpuCard) if c.display] == [0]
    doc = json.loads((tmp_path / "run.json").read_text())
    assert not doc["partial"] and doc["exit_code"] == 0
    # 60 steps: two copies each (1024 + 16 bytes), one .item() (4 bytes)
    assert (doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]) == (120, 60 * (1024 + 16))
    assert doc["totals"]["syncs"]["by_cause"] == {"item": 60, "copy_to_device": 120}
    assert doc["gpu_samples"] and {s["gpu"] for s in doc["gpu_samples"]} == {0}
    # the samples share the profile's clock and stop with the script (the sampler ran on)
    times = [s["t"] for s in doc["gpu_samples"]]
    assert 0 <= min(times) and max(times) <= doc["duration_s"] + 0.5


@pytest.mark.slow
async def test_quitting_mid_run_asks_then_keeps_a_partial_report(tmp_path):
    app = make_app(tmp_path, "-1")
    async with app.run_test(size=(120, 40)) as pilot:
        # NB: wait for the copies asserted below, not for snapshots: on a loaded machine the
        # first snapshots can come before the script's loop has made any.
        await wait_until(
            lambda: (
                app.model.last_snapshot is not None
                and app.model.last_snapshot.totals["h2d"]["count"] >= 2
            ),
            60,
        )
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        asked = app.model.last_snapshot.totals["h2d"]["count"]
        # still running: copies made after the answer
        await wait_until(lambda: app.model.last_snapshot.totals["h2d"]["count"] > asked, 30)
        assert app.model.exit_code is None and app.model.session.returncode is None
        await pilot.press("q", "y")
        await wait_until(lambda: app.ended is not None, 30)
        assert app.model.exit_code == 130
        assert "stopped by Ctrl-C" in plain(app.query_one("#status"))
    doc = json.loads((tmp_path / "run.json").read_text())
    assert (
        doc["partial"] is True and doc["error"] == "KeyboardInterrupt" and doc["exit_code"] == 130
    )
    assert doc["totals"]["h2d"]["count"] >= 2


@pytest.mark.slow
async def test_a_child_that_dies_leaves_a_partial_report_from_the_last_snapshot(tmp_path):
    app = make_app(tmp_path, "30", "die")
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: app.ended is not None, 60)
        assert app.model.exit_code == 137  # 128 + SIGKILL
        assert "killed by SIGKILL" in plain(app.query_one("#status"))
        last = app.model.last_snapshot.totals["h2d"]["count"]
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["partial"] is True and "killed by SIGKILL" in doc["error"]
    # the child died before its final snapshot: the report holds the last one that arrived
    assert 0 < doc["totals"]["h2d"]["count"] == last <= 60


@pytest.mark.slow
async def test_closing_the_app_ends_the_child_and_writes_the_report(tmp_path):
    app = make_app(tmp_path, "-1")
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: app.model.snapshots_seen >= 1, 30)
        pid = app.model.session.pid
        app.exit()
    assert app.model.session.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["partial"] is True and doc["exit_code"] == 130


@pytest.mark.slow
async def test_a_chatty_child_neither_hangs_nor_floods_the_app(tmp_path):
    app = make_app(tmp_path, "5", "chatty")
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: app.ended is not None, 90)
        assert app.model.exit_code == 0
        log = app.query_one("#log")
        assert len(log.lines) <= 2000
    assert json.loads((tmp_path / "run.json").read_text())["totals"]["h2d"]["count"] == 10


async def test_without_nvml_it_says_no_gpu_stats():
    why = "NVML library (libnvidia-ml.so) not found"
    report = copies_report("loop.py", 3)
    script = InMemorySource(Target("loop.py", ["3"]))  # no process: the view is what is tested
    script.send(Hello(7, ["loop.py", "3"]), snapshot_of(report, 0.5))
    app = LiveApp(LiveRun(script, [], why), None, gpu_interval_s=0.2, no_gpu_reason=why)
    async with app.run_test(size=(100, 30)):
        await wait_until(lambda: app.model.snapshots_seen == 1, 20)
        assert "no GPU stats: NVML library" in plain(app.query_one("#no-gpu"))
        assert not list(app.query(GpuCard))
        script.send(finished(report))
        script.exit(0)
        await wait_until(lambda: app.ended is not None, 20)
        assert app.model.exit_code == 0


@pytest.mark.slow
async def test_d_shows_where_the_child_is_and_p_pauses_the_display(tmp_path):
    seen = []

    def dumper(pid: int) -> str:
        seen.append(pid)
        return (
            f"Process {pid}: python -m gpuwatch.profile.live.child {{}}\n"
            'Thread 1 (active): "MainThread"\n    <module> (loop.py:9)\n'
            "    _exec_script (gpuwatch/profile/runner.py:206)\n"
        )

    app = make_app(tmp_path, "-1", stack_dumper=dumper)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(lambda: app.model.snapshots_seen >= 1, 30)
        await pilot.press("d")
        assert isinstance(app.screen, StackScreen)
        await wait_until(lambda: seen == [app.model.session.pid], 15)
        screen = app.screen
        assert screen.title_text.endswith("loop.py -1")  # the user's command, not the child's
        await wait_until(lambda: "loop.py:9" in plain(screen.query_one("#stack")), 15)
        shown_stack = plain(screen.query_one("#stack"))
        assert "gpuwatch" not in shown_stack and "loop.py -1" in shown_stack
        await pilot.press("escape")
        await pilot.press("p")
        assert app.paused and "display paused" in plain(app.query_one("#status"))
        shown = len(app.query_one("#log").lines)
        await wait_until(lambda: len(app.held_lines) > 0, 15)  # output came while paused
        assert len(app.query_one("#log").lines) == shown  # held, not shown
        await pilot.press("p")
        await wait_until(lambda: len(app.query_one("#log").lines) > shown, 15)
        app.model.session.stop()


@pytest.mark.slow
async def test_a_script_that_cannot_start_is_reported(tmp_path):
    session = ChildSession(
        Target(str(tmp_path / "missing.py"), []), ProfileOptions(), cwd=str(tmp_path)
    )
    app = LiveApp(LiveRun(session), None, no_gpu_reason="off")
    async with app.run_test(size=(100, 30)):
        await wait_until(lambda: app.ended is not None, 30)
    assert app.model.exit_code == 2 and "script not found" in app.model.fatal


def test_protocol_is_versioned_and_malformed_lines_are_reported():
    assert decode(encode(Hello(1, ["x.py"]))) == Hello(1, ["x.py"])
    done = Done(3, False, "KeyboardInterrupt", {"schema": "gpuwatch.profile/1"})
    assert decode(encode(done)) == done
    for line, why in (
        ("{oops", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"v": 2, "type": "hello"}', "protocol version 2"),
        ('{"v": 1, "type": "launch"}', "unknown message type 'launch'"),
        ('{"v": 1, "type": "hello", "pid": 1}', "hello message without 'command'"),
        ('{"v": 1, "type": "hello", "pid": "1", "command": []}', "hello message: pid is str"),
        (
            '{"v": 1, "type": "done", "exit_code": true, "finished": true, "error": null, '
            '"report": {}}',
            "done message: exit_code is bool",
        ),
        ('{"v": 1, "type": "fatal", "error": null}', "fatal message: error is NoneType"),
    ):
        with pytest.raises(ProtocolError, match=why):
            decode(line)
    session = ChildSession(Target("x.py", []), ProfileOptions())
    session._read_messages(
        io.BytesIO(b'{"v": 1, "type": "hello", "pid": 5, "command": []}\ngarbage\n')
    )
    drained = session.drain()
    assert [type(m).__name__ for m in drained.messages] == ["Hello"]
    assert drained.problems == [
        "malformed message from the child: not JSON: Expecting value at column 1"
    ]


@pytest.mark.slow
def test_the_command_runs_in_a_terminal_and_quits_with_the_scripts_exit_code(tmp_path):
    import time

    (tmp_path / "loop.py").write_text(LOOP + "sys.exit(3)\n")
    proc, master = start_in_pty(
        ["gpuwatch", "profile", "--live", "--demo", "--json", "r.json", "loop.py", "5"], tmp_path
    )
    screen = bytearray()
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "r.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, screen[-3000:].decode(
                errors="replace"
            )
            screen += read_pty(master)
        os.write(master, b"q")  # the report is out: q quits at once
        while proc.poll() is None:  # q quits from the summary screen the run ends on
            assert time.monotonic() < deadline, screen[-3000:].decode(errors="replace")
            screen += read_pty(master)
        screen += read_pty(master)
    finally:
        proc.kill()
        os.close(master)
    assert proc.returncode == 3, screen[-3000:].decode(errors="replace")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["exit_code"] == 3 and doc["totals"]["h2d"]["count"] == 10
    text = screen.decode(errors="replace")
    assert "gpuwatch: wrote r.json" in text and "Top lines by syncs" in text  # left on the terminal


def test_demo_without_live_is_refused(tmp_path):
    from tests.helpers import gpuwatch_here

    (tmp_path / "s.py").write_text("print('hi')\n")
    done = gpuwatch_here(["profile", "--demo", "s.py"], tmp_path)  # refused before it runs
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "gpuwatch: error: --demo goes with --live (it simulates the GPU cards)\n",
    )


async def test_hot_lines_show_the_time_of_a_lines_backward():
    from textual.app import App

    from profilers import Line, LineStats, OpCount

    fwd = LineStats("model.py", 7, "forward")
    fwd.op_breakdown["convolution.default"] = OpCount(10, 4.0)
    fwd.backward["convolution_backward.default"] = OpCount(10, 9.5)
    fwd.settle()
    other = LineStats("train.py", 3, "main")
    other.op_breakdown["add.Tensor"] = OpCount(1, 0.5)
    other.settle()

    class One(App[None]):
        def compose(self):
            yield HotLinesTable()

    app = One()
    async with app.run_test(size=(120, 10)) as pilot:
        table = app.query_one(HotLinesTable)
        table.show([Line.of(fwd).to_dict(top_ops=3), Line.of(other).to_dict(top_ops=3)], 2)
        await pilot.pause()
        assert str(table.get_cell_at((0, 5))) == "9.5 ms"  # the "its bwd" column
        assert str(table.get_cell_at((1, 5))) == "-"
        assert str(table.get_cell_at((0, 4))) == "4.0 ms"  # its own kernel time
        assert str(table.get_cell_at((0, 6))) == "10"  # its ops
        # The fast path of --no-kernel-timing counts no ops: the column says so, not 0.
        table.show([Line.of(other).to_dict(top_ops=3)], 1, "copies")
        await pilot.pause()
        assert str(table.get_cell_at((0, 6))) == "-"


def test_a_stack_of_the_child_reads_as_the_users_own():
    from gpuwatch.monitor.pyspy import as_the_users

    dump = (
        'Process 9707: /venv/bin/python -m gpuwatch.profile.live.child {"fd": 7}\n'
        "Python v3.11.7 (/usr/bin/python3.11)\n"
        "\n"
        'Thread 9707 (idle): "MainThread"\n'
        "    <module> (loop.py:9)\n"
        "    _exec_script (gpuwatch/profile/runner.py:206)\n"
        "    dispatch (/site/lib/profilers/counting/dispatch.py:180)\n"
        "    run (gpuwatch/profile/run.py:155)\n"
        "    _run_code (<frozen runpy>:88)\n"
        'Thread 9713 (idle): "gpuwatch-live-reporter"\n'
        "    wait (threading.py:331)\n"
        'Thread 9714 (active): "loader"\n'
        "    fetch (train/data.py:12)\n"
    )
    assert as_the_users(dump, "loop.py --steps 3") == (
        "Process 9707: loop.py --steps 3\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n"
        "\n"
        'Thread 9707 (idle): "MainThread"\n'
        "    <module> (loop.py:9)\n"
        'Thread 9714 (active): "loader"\n'
        "    fetch (train/data.py:12)\n"
    )
