"""The child side of ``--live``: runs the script under the profiler and streams snapshots.

``python -m gpuwatch.live.child CONFIG_JSON`` where the config holds the pipe's file descriptor
(``fd``), the snapshot ``interval_s``, the target and the profiler options.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, TextIO

from gpuwatch.live.protocol import encode


class Channel:
    """Writes messages to the parent; thread-safe; a closed pipe (parent gone) is ignored."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.closed = False

    def send(self, kind: str, **fields: Any) -> None:
        if self.closed:
            return
        line = encode(kind, **fields)
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True


def main(argv: list[str] | None = None) -> int:
    import profilers
    from gpuwatch.runner import Target, TargetError, check_target, run_target

    config = json.loads((argv if argv is not None else sys.argv[1:])[0])
    channel = Channel(os.fdopen(config["fd"], "w", encoding="utf-8"))
    target = Target(config["target"], config["args"], module=config["module"])
    command = target.command
    try:
        check_target(target)
    except TargetError as exc:
        channel.send("fatal", error=str(exc))
        return 2
    channel.send("hello", pid=os.getpid(), command=command)
    prof = profilers.profile(
        kernel_timing=config["kernel_timing"],
        user_code=config["user_code"],
        timeline_capacity=config["timeline_capacity"],
        trace_syncs=config.get("trace_syncs", False),
    )
    stop = threading.Event()

    def stream() -> None:
        while not stop.wait(config["interval_s"]):
            channel.send("snapshot", **prof.live_snapshot(top=config["top"]))

    # NB: the name keeps the profiler from entering its mode in this thread.
    reporter = threading.Thread(target=stream, name="gpuwatch-live-reporter", daemon=True)
    with prof:
        reporter.start()
        outcome = run_target(target)
    stop.set()
    reporter.join(timeout=5)
    channel.send("snapshot", **prof.live_snapshot(top=config["top"]))
    report = prof.report(command=command, exit_code=outcome.exit_code, partial=not outcome.finished)
    report.error = outcome.error
    channel.send(
        "done",
        exit_code=outcome.exit_code,
        finished=outcome.finished,
        error=outcome.error,
        report=report.to_dict(),
    )
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
