"""``gpuwatch profile --live`` always exits once its report is written: closing its terminal
during the shutdown (SIGHUP and SIGCONT from the kernel), many runs at once on a loaded machine,
and a Textual writer thread that never finishes."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from gpuwatch.ui.signals import SHUTDOWN_S
from tests.conftest import read_pty

# Two copies to a (fake) GPU, then the script ends: the live view shows its summary.
SCRIPT = textwrap.dedent("""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(shape_env=ShapeEnv()):
        for _ in range(2):
            torch.randn(16).to("cuda:0")
""")

LIVE = ["profile", "--live", "--demo", "--json", "r.json", "s.py"]


def _controlling_tty() -> None:
    # A session of its own whose controlling terminal is the pty: closing the terminal then
    # sends SIGHUP and SIGCONT, as a closed terminal window or ssh session does.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def start(args: list[str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
        preexec_fn=_controlling_tty,
    )
    os.close(slave)
    return proc, master


def _report_written(path: Path) -> bool:
    try:
        return json.loads(path.read_text())["totals"]["h2d"]["count"] == 2
    except (OSError, ValueError, KeyError):
        return False


@pytest.mark.slow
def test_closing_the_terminal_during_shutdown_many_times_under_load_always_exits(tmp_path):
    runs = []
    burner = None
    try:
        for k in range(4):
            here = tmp_path / str(k)
            here.mkdir()
            (here / "s.py").write_text(SCRIPT)
            runs.append((here, *start([sys.executable, "-m", "gpuwatch", *LIVE], here)))
        deadline = time.monotonic() + 120
        for here, proc, master in runs:
            while not _report_written(here / "r.json"):  # the script ended, the report is out
                assert time.monotonic() < deadline and proc.poll() is None
                read_pty(master)
        # NB: the load where the hang was, the shutdowns (four runs starting at once load the
        # machine enough before): burning a core from the start slowed the starts, not the test.
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _, _, master in runs:
            read_pty(master)
            os.write(master, b"q")  # the script has ended: q quits
        closed = time.monotonic()
        for _, _, master in runs:
            os.close(master)  # the terminal goes while the app shuts down
        for _, proc, _ in runs:
            proc.wait(timeout=SHUTDOWN_S + 20)  # bounded, whatever the shutdown was doing
        assert time.monotonic() - closed < SHUTDOWN_S + 20
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
        for _, proc, _ in runs:
            if proc.poll() is None:
                proc.kill()
    for here, proc, _ in runs:
        assert proc.returncode in (0, 128 + signal.SIGHUP)
        assert _report_written(here / "r.json")


#: The shutdown's bound in the wedged run below (the real one is SHUTDOWN_S): the same guard,
#: waited out in 1 s instead of 5.
BOUND_S = 1.0

# Textual's writer thread wedged for good: its stop() never returns.
WEDGED = f"""
import sys, threading
from textual.drivers import _writer_thread
from gpuwatch.ui.signals import ShutdownGuard
_writer_thread.WriterThread.stop = lambda self: threading.Event().wait()
ShutdownGuard.__init__.__defaults__ = ({BOUND_S},)
from gpuwatch.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_writer_thread_that_never_stops_cannot_keep_gpuwatch_from_exiting(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    proc, master = start([sys.executable, "-c", WEDGED, *LIVE], tmp_path)
    screen = bytearray()
    try:
        deadline = time.monotonic() + 120
        while not _report_written(tmp_path / "r.json"):
            assert time.monotonic() < deadline and proc.poll() is None, screen[-2000:]
            screen += read_pty(master)
        os.write(master, b"q")  # the report is out: q quits at once
        began = time.monotonic()
        while proc.poll() is None:
            assert time.monotonic() - began < BOUND_S + 15, "gpuwatch never exited"
            screen += read_pty(master)
        screen += read_pty(master)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0
    assert b"the terminal did not close within 1 s; exiting (the reports are written)" in screen
    assert b"\x1b[?1049l" in screen  # the alternate screen was left all the same


def test_the_guard_ends_only_a_real_run_never_a_test_runners_process(monkeypatch):
    import threading

    from gpuwatch.ui import signals

    exits: list[int] = []
    monkeypatch.setattr(signals.os, "_exit", exits.append)
    monkeypatch.setattr(signals.signal, "signal", lambda *a: None)  # leave pytest's handlers
    # Under App.run_test() nothing enables the guard: arming it starts no watcher at all.
    idle = signals.ShutdownGuard(lambda: 3, bound_s=0.01)
    idle.arm()
    assert not any(t.name == "gpuwatch-shutdown" for t in threading.enumerate())
    # A real run (run_restoring_signals enables it) that does not return in time is ended.
    real = signals.ShutdownGuard(lambda: 3, bound_s=0.01)
    real.enable()
    real.arm()
    watcher = next(t for t in threading.enumerate() if t.name == "gpuwatch-shutdown")
    watcher.join(5)
    assert exits == [3]
