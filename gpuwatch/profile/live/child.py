"""The child side of ``--live``: runs the script under the profiler and streams snapshots.

``python -m gpuwatch.profile.live.child CONFIG_JSON`` where the config holds the pipe's file descriptor
(``fd``), the parent's pid, the snapshot ``interval_s``, the target, the profiler options and the
outputs the user asked for.

The child never outlives the live app: it asks the kernel for SIGTERM when its parent dies
(Linux), and a reporter that finds the pipe closed stops the script the same way. With the parent
gone, the child writes the report files itself, so they are not lost.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
from typing import TextIO

from gpuwatch.profile.live.protocol import Done, Fatal, Hello, LiveSnapshot, Message, encode
from profilers.registry import OwnThread
from profilers.report import Report

#: prctl(2): deliver a signal to this process when its parent dies.
_PR_SET_PDEATHSIG = 1


class Channel:
    """Writes messages to the parent; thread-safe; a closed pipe (parent gone) is ignored."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.closed = False

    def wait_closed(self, timeout_s: float) -> bool:
        """True once the parent's end of the pipe is closed, waiting up to ``timeout_s``."""
        if self.closed:
            return True
        import select

        poller = select.poll()
        poller.register(self._stream.fileno(), select.POLLERR | select.POLLHUP)
        try:
            closed = bool(poller.poll(timeout_s * 1000))
        except (OSError, ValueError):
            closed = True
        self.closed = self.closed or closed
        return self.closed

    def send(self, msg: Message) -> None:
        if self.closed:
            return
        line = encode(msg)
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True


def die_with_parent(parent_pid: int) -> None:
    """SIGTERM for this process when the parent dies (and now, if it already has)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the reporter's closed pipe still ends the child
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    from gpuwatch.analysis.profile import analysed
    from gpuwatch.output.write import Output, write_reports
    from gpuwatch.profile.options import ProfileOptions
    from gpuwatch.profile.run import ProfiledRun
    from gpuwatch.profile.runner import Target, TargetError, check_target
    from gpuwatch.profile.worded import worded
    from profilers.errors import ProfilerError

    config = json.loads((argv if argv is not None else sys.argv[1:])[0])
    # NB: the child gets SIGINT only from the live app asking the script to stop (it runs in a
    # session of its own, away from the terminal's Ctrl-C), so that request must work even
    # when gpuwatch itself was started with SIGINT ignored (a background job, nohup).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    channel = Channel(os.fdopen(config["fd"], "w", encoding="utf-8"))
    target = Target(config["target"], config["args"], module=config["module"])
    try:
        check_target(target)
    except (TargetError, SyntaxError) as exc:
        channel.send(Fatal(str(exc)))
        return 2
    # NB: no checkpoints here: the app keeps the last snapshot and writes the partial report.
    options = ProfileOptions.from_json(config["options"]).replace(checkpoint_s=0.0)
    wanted = [Output(*out) for out in config.get("outputs", [])]
    top = int(config.get("top", 30))
    stop = threading.Event()
    run: ProfiledRun

    def stream() -> None:
        while not stop.wait(config["interval_s"]):
            if not run.prof.running:
                continue  # not started yet, or already ended
            channel.send(LiveSnapshot(**run.prof.live_snapshot(top=top)))
            if channel.closed:
                # The live app is gone: stop the script the way the scheduler would.
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def on_report(report: Report) -> None:
        stop.set()
        reporter.join(timeout=5)
        channel.send(LiveSnapshot(**run.prof.live_snapshot(top=top)))
        channel.send(Done(report.exit_code, not report.partial, report.error, report.to_dict()))
        # NB: when the app dies, the kernel's SIGTERM (PR_SET_PDEATHSIG) can come while the
        # app's other threads still hold the pipe open for a moment: a SIGTERM'd child waits a
        # little for the pipe to close before deciding that nobody else will write the files.
        stopped_by_term = report.exit_code == 128 + signal.SIGTERM
        if wanted and (channel.closed or (stopped_by_term and channel.wait_closed(2.0))):
            write_reports(report, wanted, analysed(report))  # nobody else will write them now

    try:
        run = ProfiledRun(target, options, on_report, None, None, config.get("gpu_stats", "off"))
    except ProfilerError as exc:  # the fake GPU could not start: one line for the app
        channel.send(Fatal(worded(exc)))
        return 2
    # NB: the name keeps the profiler from entering its mode in this thread.
    reporter = OwnThread(target=stream, name="gpuwatch-live-reporter", daemon=True)
    channel.send(Hello(os.getpid(), list(target.command)))
    reporter.start()
    if "parent_pid" in config:
        die_with_parent(int(config["parent_pid"]))
    try:
        return run.run()
    except ProfilerError as exc:  # the profile could not start (trace_syncs on this torch)
        channel.send(Fatal(worded(exc)))
        return 2


if __name__ == "__main__":
    sys.exit(main())
