"""The parent side of ``--live``: starts the child, reads its messages and output on threads.

Nothing here blocks the caller: :meth:`ChildSession.drain` returns whatever arrived since the
last call. A child that prints a lot cannot stall (its pipes are always read), and one that dies
or sends garbage is reported, never fatal.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from gpuwatch.live.protocol import ProtocolError, decode

#: Lines of the child's output kept when the display cannot keep up.
MAX_PENDING_LINES = 5000


@dataclass
class LiveOptions:
    target: str
    args: Sequence[str]
    module: bool = False
    interval_s: float = 0.25
    kernel_timing: bool = True
    user_code: list[str] | None = None
    timeline_capacity: int = 10_000
    top: int = 30
    trace_syncs: bool = False


@dataclass
class Drained:
    """What arrived since the last :meth:`ChildSession.drain`."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    """``(stream, text)`` with stream ``"stdout"`` or ``"stderr"``."""
    problems: list[str] = field(default_factory=list)
    dropped_lines: int = 0


class ChildSession:
    def __init__(
        self, options: LiveOptions, python: str = sys.executable, cwd: str | None = None
    ) -> None:
        self.options = options
        self.python = python
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        """The script's process (the child's pid, as it reported in its hello)."""
        self.started_at = 0.0
        self.stop_requested = False
        self._messages: queue.SimpleQueue[dict[str, Any] | str] = queue.SimpleQueue()
        self._lines: queue.Queue[tuple[str, str]] = queue.Queue(maxsize=MAX_PENDING_LINES)
        self._dropped = 0
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        o = self.options
        config = {
            "fd": write_fd,
            "interval_s": o.interval_s,
            "target": o.target,
            "args": list(o.args),
            "module": o.module,
            "kernel_timing": o.kernel_timing,
            "user_code": o.user_code,
            "timeline_capacity": o.timeline_capacity,
            "top": o.top,
            "trace_syncs": o.trace_syncs,
        }
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [self.python, "-m", "gpuwatch.live.child", json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        )
        os.close(write_fd)
        self.pid = self.process.pid
        self.started_at = time.monotonic()
        assert self.process.stdout is not None and self.process.stderr is not None
        self._spawn(self._read_messages, os.fdopen(read_fd, "rb"))
        self._spawn(self._read_lines, self.process.stdout, "stdout")
        self._spawn(self._read_lines, self.process.stderr, "stderr")

    def _spawn(self, fn: Any, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, name=f"gpuwatch-live-{fn.__name__}", daemon=True)
        t.start()
        self._threads.append(t)

    def _read_messages(self, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in pipe:
                text = raw.decode("utf-8", errors="replace").rstrip("\n")
                if not text:
                    continue
                try:
                    self._messages.put(decode(text))
                except ProtocolError as exc:
                    self._messages.put(f"malformed message from the child: {exc}")

    def _read_lines(self, pipe: IO[bytes], name: str) -> None:
        with pipe:
            for raw in pipe:
                line = (name, raw.decode("utf-8", errors="replace").rstrip("\n"))
                try:
                    self._lines.put_nowait(line)
                except queue.Full:
                    self._dropped += 1  # the display is behind: keep the newest lines coming

    def drain(self, max_lines: int = 500) -> Drained:
        out = Drained()
        while True:
            try:
                item = self._messages.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, str):
                out.problems.append(item)
            else:
                out.messages.append(item)
        for _ in range(max_lines):
            try:
                out.lines.append(self._lines.get_nowait())
            except queue.Empty:
                break
        out.dropped_lines, self._dropped = self._dropped, 0
        return out

    @property
    def returncode(self) -> int | None:
        """None while the child runs; then its exit status as Popen gives it (-N: signal N)."""
        if self.process is None:
            return None
        return self.process.poll()

    @property
    def exit_code(self) -> int | None:
        """The status a shell would report: 128+N for a child killed by signal N."""
        code = self.returncode
        if code is None:
            return None
        return 128 - code if code < 0 else code

    @property
    def finished_reading(self) -> bool:
        """The child has exited and every pipe has been read to its end."""
        return self.returncode is not None and not any(t.is_alive() for t in self._threads)

    def interrupt(self) -> None:
        """Ctrl-C for the script (it stops, and the child still sends its report)."""
        self.stop_requested = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def stop(self, grace_s: float = 5.0) -> None:
        """Interrupt, wait up to ``grace_s`` for the report, then kill."""
        if self.process is None:
            return
        self.interrupt()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait(timeout=5)
        for t in self._threads:
            t.join(timeout=2)

    @staticmethod
    def describe_exit(code: int | None) -> str:
        """``code`` as Popen gives it: negative for a signal."""
        if code is None:
            return "running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        if code == 130:
            return "stopped by Ctrl-C (exit code 130)"
        return f"exited with {code}"
