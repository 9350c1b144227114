"""The live view drawing a run and turning keys into the run's intents, fed by a script in
memory (:class:`InMemorySource`: the protocol's messages and output lines handed in, no process):
a second or less each. The same with real children: tests/test_live_app.py (slow)."""

from __future__ import annotations

import json

from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import Done, Hello
from gpuwatch.profile.live.session import InMemorySource
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from gpuwatch.ui.screens import ConfirmScreen, SummaryScreen
from tests.conftest import plain, wait_until
from tests.test_live_model import snapshot
from tests.test_report_render import report as finished_report


def log_lines(app: LiveApp) -> list[str]:
    return [str(line.text) for line in app.query_one("#log").lines]  # type: ignore[attr-defined]


async def test_the_end_shows_the_summary_the_status_and_the_last_output(tmp_path):
    doc = finished_report().to_dict() | {"exit_code": 3}
    session = InMemorySource(Target("train.py", ["--steps", "3"]))
    session.send(Hello(4242, ["train.py"]), snapshot(0.5, 2), Done(3, True, None, doc))
    session.print("epoch 1")
    session.show_progress(" 50%")
    session.exit(3)
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))], gpu_stats="off")
    app = LiveApp(run, None, no_gpu_reason="off", header_clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: app.ended is not None, 20)
        await pilot.pause()
        assert isinstance(app.screen, SummaryScreen)
        assert app.screen.title_text == "Summary: exited with 3"
        assert "Top lines by syncs" in plain(app.screen.query_one("#summary"))
        status = plain(app.query_one("#status"))
        assert status.startswith("ended: exited with 3 · 00:") and "pid 4242" in status
        # the progress text left without a newline is the stream's last line, not progress
        assert sorted(log_lines(app)) == [" 50%", "epoch 1"]
        assert not app.query_one("#progress").display
    assert app.model.result().exit_code == 3
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3


async def test_a_summary_that_fails_to_render_is_said_and_q_still_quits_with_the_code(
    tmp_path, monkeypatch
):
    from gpuwatch.output import text

    def broken(*args: object, **kw: object) -> object:
        raise KeyError("rendering bug")

    monkeypatch.setattr(text, "summary", broken)
    doc = finished_report().to_dict() | {"exit_code": 3}
    session = InMemorySource(Target("train.py", []))
    session.send(Hello(4242, ["train.py"]), Done(3, True, None, doc))
    session.exit(3)
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))], gpu_stats="off")
    app = LiveApp(run, None, no_gpu_reason="off", header_clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: app.ended is not None, 20)
        await pilot.pause()
        assert not isinstance(app.screen, SummaryScreen)
        said = [n.message for n in app._notifications]
        assert any(m.startswith("could not show the summary (KeyError") for m in said), said
        await pilot.press("q")  # the report is out: q quits at once, with the script's code
        await pilot.pause()
        assert app.return_value == 3
    assert app.model.result().exit_code == 3
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3


async def test_q_asks_then_stops_the_script_and_keeps_the_report_it_sends(tmp_path):
    doc = finished_report().to_dict() | {
        "partial": True,
        "error": "KeyboardInterrupt",
        "exit_code": 130,
    }

    def on_ctrl_c(script: InMemorySource) -> None:  # the child's report, sent as it stops
        script.send(Done(130, False, "KeyboardInterrupt", doc))
        script.exit(130)

    session = InMemorySource(Target("train.py", []), on_interrupt=on_ctrl_c)
    session.send(Hello(7, ["train.py"]), snapshot(0.5, 2))
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))])
    app = LiveApp(run, None, no_gpu_reason="off", header_clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: run.snapshots_seen == 1, 20)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not session.stop_requested and session.returncode is None  # still running
        await pilot.press("q", "y")
        assert session.stop_requested
        await wait_until(lambda: app.ended is not None, 20)
        assert run.exit_code == 130
        status = plain(app.query_one("#status"))
        assert "ended: stopped by Ctrl-C (exit code 130) (partial report)" in status
        await pilot.press("q")  # from the summary screen: the run has ended, so it quits
        await wait_until(lambda: not app.is_running, 20)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (doc["partial"], doc["error"], doc["exit_code"]) == (True, "KeyboardInterrupt", 130)


async def test_pause_holds_the_output_until_resumed():
    session = InMemorySource(Target("train.py", []))
    session.print("first")
    app = LiveApp(LiveRun(session), None, no_gpu_reason="off", header_clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: log_lines(app) == ["first"], 20)
        await pilot.press("p")
        assert "running (display paused: p resumes)" in plain(app.query_one("#status"))
        session.print("more")
        await wait_until(lambda: list(app.held_lines) == [("stdout", "more")], 20)
        assert log_lines(app) == ["first"]  # held, not shown
        await pilot.press("p")
        assert log_lines(app) == ["first", "more"] and not app.held_lines


def trainer_line() -> dict[str, object]:
    """``trainer.train()`` at train.py:31, whose 79 syncs HF's Trainer made at two of its lines
    (and 10 copies of 4 bytes at the second), as a snapshot's line."""
    from profilers import Copies, Line, Syncs
    from profilers.libraries import LibraryFrame

    nan_filter = LibraryFrame("transformers/trainer.py", 2502, "_inner_training_loop")
    log = LibraryFrame("transformers/trainer.py", 2410, "_maybe_log_save_evaluate")
    for _ in range(69):
        nan_filter.add(False, 0, "item")
    for _ in range(10):
        log.add(True, 4, "copy_to_host")
    line = Line(
        file="train.py",
        line=31,
        function="<module>",
        source="trainer.train()",
        d2h=Copies(10, 40, 0, 0),
        syncs=Syncs(79, {"item": 69, "copy_to_host": 10}),
        library=(nan_filter, log),
    )
    return line.to_dict(top_ops=3)


async def test_a_library_frame_shows_under_the_users_line_with_its_own_figures():
    from gpuwatch.profile.live.protocol import LiveSnapshot
    from gpuwatch.ui.widgets import HotLinesTable
    from tests.test_live_model import totals

    snap = LiveSnapshot(1.0, totals(0), [], [trainer_line()], 1, 89, "every_op")
    session = InMemorySource(Target("train.py", []))  # the script runs on, its lines in view
    session.send(Hello(9, ["train.py"]), snap)
    run = LiveRun(session, [], gpu_stats="off")
    app = LiveApp(run, None, no_gpu_reason="off", header_clock=False)
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(HotLinesTable)
        await wait_until(lambda: table.row_count == 3, 20)
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(3)]
        head = table.shown_columns
        assert head[:4] == ["line", "syncs", "bytes", "copies"]
        assert [r[:4] for r in rows] == [
            ["train.py:31", "79", "40 B", "10"],
            ["↳ …/trainer.py:2502", "69", "0 B", "0"],  # the line column's 28 at most
            ["↳ …/trainer.py:2410", "10", "40 B", "10"],
        ]
        source = head.index("source")  # the whole path where there is room
        assert rows[1][source] == "in _inner_training_loop (transformers/trainer.py)   [item 69]"
        assert rows[2][head.index("kernel")] == ""  # a frame has no time of its own
        # the cursor on a library frame's row is on the user's line it is under
        table.focus()
        await pilot.press("down", "down")
        assert table.cursor_row == 2 and table.selected_key == "train.py:31"
        table.show([trainer_line()], 1)  # the next snapshot: the cursor stays on that frame
        assert table.cursor_row == 2
        table.show([{**trainer_line(), "library": []}], 1)  # its frames gone: on the line
        assert (table.row_count, table.cursor_row) == (1, 0)
