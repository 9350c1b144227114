"""The live run's model without its view (gpuwatch/profile/live/model.py): a script speaks the
protocol, the run keeps what it said, decides the exit code, builds and writes the report, and
posts its events; no Textual, no torch child. The script is held in memory
(:class:`InMemorySource`: no process) but for the tests of the pipes themselves, where a real
process (a few lines of ``sh``) writes them (slow)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.monitor.nvml import FakeBackend
from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import Ended, LiveRun, Update
from gpuwatch.profile.live.protocol import Done, Fatal, Hello, LiveSnapshot, Message
from gpuwatch.profile.live.session import ChildSession, InMemorySource
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from tests.conftest import FakeClock
from tests.live_helpers import sh_child as child
from tests.test_report_render import report as finished_report

DEVICES = [{"device": "cuda:1", "name": "NVIDIA H100 80GB HBM3 (demo)"}]


def totals(h2d: int) -> dict[str, object]:
    """Totals with ``h2d`` copies of 1 KiB each, one ``item`` sync per copy."""
    empty = {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0}
    return {
        "h2d": {**empty, "count": h2d, "bytes": 1024 * h2d},
        "d2h": empty,
        "d2d": empty,
        "p2p": empty,
        "syncs": {"count": h2d, "by_cause": {"item": h2d}},
        "kernel_time_ms": 0.0,
        "ops": 3 * h2d,
    }


def snapshot(elapsed_s: float, h2d: int) -> LiveSnapshot:
    return LiveSnapshot(elapsed_s, totals(h2d), DEVICES, [], 0, 4 * h2d, "every_op")


def start_when_ready(run: LiveRun) -> queue.Queue[Update]:
    """Starts ``run`` on a child whose first line is ``ready`` (its traps are set: a signal
    before then would find sh's defaults) and returns its events once that line came."""
    events: queue.Queue[Update] = queue.Queue()
    run.start(events.put)
    while not any(
        ("stdout", "ready") in e.lines for e in [events.get(timeout=20)] if isinstance(e, Update)
    ):
        pass
    return events


def the_end(run: LiveRun, updates: queue.Queue[Update], timeout_s: float = 20.0) -> Ended:
    """Waits for ``run``'s final update, then ends it as the view does."""
    while not updates.get(timeout=timeout_s).final:
        pass
    ended = run.end()
    assert ended is not None
    return ended


def run_to_the_end(run: LiveRun, timeout_s: float = 20.0) -> list[Update | Ended]:
    """Starts ``run``; returns its updates up to the final one, and its :class:`Ended`."""
    updates: queue.Queue[Update] = queue.Queue()
    run.start(updates.put)
    seen = [updates.get(timeout=timeout_s)]
    while not seen[-1].final:
        seen.append(updates.get(timeout=timeout_s))
    ended = run.end()
    assert ended is not None and run.end() is None  # once
    return [*seen, ended]


@pytest.mark.slow
def test_the_childs_own_report_and_exit_code_are_kept_and_written(tmp_path: Path) -> None:
    """End to end through a real process's pipes: its messages, its two streams, its exit."""
    doc = finished_report().to_dict()
    session = child(
        'echo "epoch 1"; echo "warning: slow" >&2; exit 3',
        [Hello(4242, ["train.py", "--steps", "3"]), snapshot(0.5, 2), Done(3, True, None, doc)],
    )
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))], gpu_stats="demo")
    events = run_to_the_end(run)
    updates = [e for e in events if isinstance(e, Update)]
    assert updates[-1].final and not any(u.final for u in updates[:-1])
    # two streams read by two threads: each in its own order
    assert sorted(line for u in updates for line in u.lines) == [
        ("stderr", "warning: slow"),
        ("stdout", "epoch 1"),
    ]
    ended = events[-1]
    assert isinstance(ended, Ended)
    assert (ended.exit_code, ended.fatal) == (3, None)
    assert ended.written == [(True, f"wrote {tmp_path / 'r.json'}")]
    assert run.pid == 4242  # as the child said in its hello
    assert run.state() == "ended: exited with 3"
    assert run.result().exit_code == 3
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["partial"] is False and written["options"]["gpu_stats"] == "demo"
    # 25 item() syncs of 4 bytes each on train.py:42, as the child's report said
    assert written["totals"]["d2h"]["count"] == 25 and written["sites"][0]["line"] == 42


def script(*messages: Message, **kw: Any) -> InMemorySource:
    """A script in memory that has sent ``messages``: train.py --steps 3."""
    source = InMemorySource(Target("train.py", ["--steps", "3"]), **kw)
    source.send(*messages)
    return source


def test_a_child_killed_without_a_report_leaves_one_from_its_last_snapshot(tmp_path: Path) -> None:
    session = script(Hello(7, ["train.py"]), snapshot(0.25, 2), snapshot(0.5, 5))
    session.kill()
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))])
    ended = run_to_the_end(run)[-1]
    assert isinstance(ended, Ended) and ended.exit_code == 137  # 128 + SIGKILL
    assert run.snapshots_seen == 2
    assert run.state() == "ended: killed by SIGKILL (partial report)"
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["partial"] is True
    assert written["error"] == "the script's process ended without a report: killed by SIGKILL"
    assert written["command"] == ["train.py", "--steps", "3"]
    # the last snapshot's totals: 5 copies of 1 KiB
    assert (written["totals"]["h2d"]["count"], written["totals"]["h2d"]["bytes"]) == (5, 5120)


def test_a_script_that_cannot_start_ends_with_2_and_no_report(tmp_path: Path) -> None:
    session = script(Fatal("script not found: train.py"))
    session.exit(2)
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))])
    ended = run_to_the_end(run)[-1]
    assert ended == Ended(2, None, [], "script not found: train.py")
    assert run.state() == "could not start: script not found: train.py"
    assert run.result().fatal == "script not found: train.py"
    assert not (tmp_path / "r.json").exists()


def test_a_signal_to_gpuwatch_is_its_exit_code_and_the_reports_error() -> None:
    session = script(snapshot(0.5, 1))
    session.kill()
    run = LiveRun(session)
    run.note_signal(signal.SIGTERM)
    run.note_signal(signal.SIGHUP)  # the first one counts
    run_to_the_end(run)
    assert run.exit_code == 137 and run.result().exit_code == 128 + signal.SIGTERM
    assert run.report is not None and run.report.error == (
        "stopped: gpuwatch received SIGTERM (the script's process ended without a report: "
        "killed by SIGKILL)"
    )


def test_closing_a_running_child_stops_it_and_keeps_the_report_it_sends(tmp_path: Path) -> None:
    doc = finished_report().to_dict() | {
        "partial": True,
        "error": "KeyboardInterrupt",
        "exit_code": 130,
    }

    def on_ctrl_c(source: InMemorySource) -> None:  # the child's report, sent as it stops
        source.send(Done(130, False, "KeyboardInterrupt", doc))
        source.exit(130)

    session = script(Hello(1, ["train.py"]), snapshot(0.5, 2), on_interrupt=on_ctrl_c)
    run = LiveRun(session, [Output("json", str(tmp_path / "r.json"))])
    events: queue.Queue[Update] = queue.Queue()
    run.start(events.put)
    while not any(u.snapshots for u in [events.get(timeout=20)] if isinstance(u, Update)):
        pass  # until the snapshot is in
    assert run.state() == "running" and not run.ended
    run.close()  # what the app does when it goes
    assert (
        run.exit_code == 130
        and run.state() == "ended: stopped by Ctrl-C (exit code 130) (partial report)"
    )
    written = json.loads((tmp_path / "r.json").read_text())
    assert (written["partial"], written["error"], written["exit_code"]) == (
        True,
        "KeyboardInterrupt",
        130,
    )


@pytest.mark.slow
def test_a_stopped_script_that_ignores_ctrl_c_is_killed_after_the_grace() -> None:
    """End to end: a real process that ignores SIGINT, killed by the run's timer."""
    run = LiveRun(child("trap '' INT; echo ready; while :; do sleep 0.05; done"), stop_grace_s=0.2)
    events = start_when_ready(run)
    run.stop()
    assert run.state() == "stopping…"
    event = the_end(run, events)
    assert event.exit_code == 137 and run.how_it_ended() == "killed by SIGKILL"


def test_gpu_samples_are_on_the_profiles_clock_and_stop_with_the_script(clock: FakeClock) -> None:
    run = LiveRun(ChildSession(Target("train.py", []), ProfileOptions()), clock=clock)
    gpus = [FakeBackend(gpu_count=2, clock=clock).sample(i) for i in range(2)]
    run.record_gpus(gpus)  # before the profile starts: not the run's
    assert list(run.gpu_samples) == []
    clock.advance(2.0)
    run.take([snapshot(0.5, 1)])  # the child's clock: its profile began 0.5 s ago
    clock.advance(1.0)
    run.record_gpus(gpus)
    assert [(s["t"], s["gpu"]) for s in run.gpu_samples] == [(1.5, 0), (1.5, 1)]
    run.take([Done(0, True, None, finished_report().to_dict())])
    run.record_gpus(gpus)  # the script has ended: no more samples
    assert len(run.gpu_samples) == 2
    assert run.used_gpus(DEVICES) == {1}


def test_elapsed_time_runs_with_the_run_and_stops_at_its_end(clock: FakeClock) -> None:
    session = script(on_interrupt=lambda source: source.exit(0))
    session.print("ready")
    run = LiveRun(session, clock=clock)
    assert run.elapsed_s() == 0.0  # not started
    events = start_when_ready(run)
    clock.advance(65.0)
    assert run.elapsed_s() == 65.0
    run.stop()
    the_end(run, events)
    clock.advance(30.0)
    assert run.elapsed_s() == 65.0
    # no report came: the process's exit code stands, the report is the partial one
    assert run.exit_code == 0 and run.report is not None and run.report.partial


@pytest.mark.slow
def test_the_model_imports_no_textual_rich_or_torch() -> None:
    import sys

    probe = (
        "import sys, gpuwatch.profile.live.model; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich', 'torch'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"
