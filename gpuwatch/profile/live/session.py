"""What a ``--live`` run reads: the script's messages, its output by line, its progress line and
its end (:class:`LiveSource`), from a child process (:class:`ChildSession`: it starts the child and
reads its pipes on threads) or from memory (:class:`InMemorySource`: a script whose messages and
output are handed in by calls, for a view driven without a process).

Nothing here blocks the caller: :meth:`LiveSource.drain` returns whatever arrived since the
last call, and :attr:`LiveSource.arrived` is set whenever something did (a message, a line,
a new progress line, the end), so a reader waits on it instead of polling. A child that prints
a lot cannot stall (its pipes are always read), and one that dies or sends garbage is reported,
never fatal.
"""

from __future__ import annotations

import abc
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from gpuwatch.output.write import Output
from gpuwatch.profile.live.protocol import Message, ProtocolError, decode
from gpuwatch.profile.options import ProfileOptions
from gpuwatch.profile.runner import Target
from profilers.registry import OwnThread

#: Lines of the child's output kept when the display cannot keep up.
MAX_PENDING_LINES = 5000
#: Characters of one line of output shown; the rest is counted, not kept (a 50 MB line of
#: output must cost neither memory nor the display's time).
MAX_LINE_CHARS = 4000
#: After the script's process exited, how long its pipes may stay open (a grandchild holding
#: them) before the run counts as ended anyway.
PIPE_GRACE_S = 1.0


@dataclass
class Drained:
    """What arrived since the last :meth:`LiveSource.drain`."""

    messages: list[Message] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    """``(stream, text)`` with stream ``"stdout"`` or ``"stderr"``."""
    problems: list[str] = field(default_factory=list)
    dropped_lines: int = 0


class LiveSource(abc.ABC):
    """The script a live run watches, as the run reads it (gpuwatch/profile/live/model.py):
    queues its feeder fills (:meth:`post`, :meth:`_put`, :meth:`_show_progress`,
    :meth:`_finish`) from any thread, and the script's own controls (start, Ctrl-C, kill)."""

    def __init__(self, target: Target, options: ProfileOptions) -> None:
        self.target = target
        self.options = options
        self.pid: int | None = None
        """The script's process (the child's pid, as it reported in its hello)."""
        self.stop_requested = False
        self.arrived = threading.Event()
        """Set by the feeders when anything arrives or the run ends; cleared by the reader
        (gpuwatch/profile/live/model.py) before it drains."""
        self._finished = threading.Event()
        self._messages: queue.SimpleQueue[Message | str] = queue.SimpleQueue()
        self._lines: queue.Queue[tuple[str, str]] = queue.Queue(maxsize=MAX_PENDING_LINES)
        self._dropped = 0
        self._progress: dict[str, str] = {}

    def post(self, item: Message | str) -> None:
        """A message of the script, or (a string) a malformed one, said as a problem."""
        self._messages.put(item)
        self.arrived.set()

    def _put(self, name: str, text: str) -> None:
        try:
            self._lines.put_nowait((name, text))
        except queue.Full:
            self._dropped += 1  # the display is behind: keep the newest lines coming
        self.arrived.set()

    def _show_progress(self, name: str, text: str) -> None:
        self._progress[name] = text
        self.arrived.set()

    def _finish(self) -> None:
        """Everything the script will say has arrived."""
        self._finished.set()
        self.arrived.set()

    @property
    def lines_pending(self) -> bool:
        """Lines of output wait to be drained (more than one drain takes)."""
        return not self._lines.empty()

    def progress(self) -> str:
        """The child's current progress line (text after its last carriage return, before any
        newline), or ``""``."""
        return self._progress.get("stderr") or self._progress.get("stdout") or ""

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
        if out.dropped_lines:
            note = f"[gpuwatch: {out.dropped_lines} lines of output skipped to keep up]"
            out.lines.append(("stderr", note))
        return out

    @property
    def finished_reading(self) -> bool:
        """The script has ended and everything it said has arrived."""
        return self._finished.is_set()

    @property
    def exit_code(self) -> int | None:
        """The status a shell would report: 128+N for a script killed by signal N."""
        code = self.returncode
        if code is None:
            return None
        return 128 - code if code < 0 else code

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

    @property
    @abc.abstractmethod
    def started(self) -> bool:
        """Whether the script runs (or ran) already: :meth:`start` is not to be called."""

    @abc.abstractmethod
    def start(self) -> None:
        """Starts the script."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None:
        """None while the script runs; then its exit status as Popen gives it (-N: signal N)."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Ctrl-C for the script (it stops, and still sends its report)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Ends the script at once (it sends nothing more)."""

    @abc.abstractmethod
    def stop(self, grace_s: float = 5.0) -> None:
        """Interrupt, wait up to ``grace_s`` for the report, then kill."""


class InMemorySource(LiveSource):
    """A script held in memory: what it says is handed in by calls (:meth:`send`,
    :meth:`print`, :meth:`show_progress`, :meth:`exit`), into the same queues a child's pipes
    fill, so a live run and its view are driven with no process (the view's tests).
    ``on_interrupt`` is what the script does on Ctrl-C (send its report and exit 130, or
    nothing: one that ignores it, which ``stop`` kills after the grace); without it the script
    dies of the signal, as a process with no handler does."""

    def __init__(
        self,
        target: Target,
        options: ProfileOptions | None = None,
        pid: int | None = None,
        on_interrupt: Callable[[InMemorySource], None] | None = None,
    ) -> None:
        super().__init__(target, options or ProfileOptions())
        self.pid = pid
        self.on_interrupt = on_interrupt
        self._code: int | None = None
        self._exited = threading.Event()
        self._lock = threading.Lock()

    def send(self, *messages: Message) -> None:
        """Messages of the script, in order (as its message pipe carries them)."""
        for m in messages:
            self.post(m)

    def print(self, text: str, stream: str = "stdout") -> None:
        """A line of the script's output (a progress line on that stream ends with it)."""
        self._progress.pop(stream, None)
        self._put(stream, text)

    def show_progress(self, text: str, stream: str = "stderr") -> None:
        """The stream's current progress line (what follows a carriage return)."""
        self._show_progress(stream, text)

    def exit(self, code: int) -> None:
        """The script ends with ``code`` (-N: killed by signal N); a progress line left
        without a newline becomes the stream's last line, as at a pipe's end."""
        with self._lock:
            if self._code is not None:
                return
            for stream in ("stdout", "stderr"):
                text = self._progress.pop(stream, None)
                if text is not None:
                    self._put(stream, text)
            self._code = code
            self._exited.set()
        self._finish()

    @property
    def started(self) -> bool:
        return True  # it is there from the start: its feeder says what it does

    def start(self) -> None:
        """Nothing to start: what the script says comes from its feeder."""

    @property
    def returncode(self) -> int | None:
        return self._code

    def interrupt(self) -> None:
        self.stop_requested = True
        if self._code is None:
            if self.on_interrupt is None:
                self.exit(-signal.SIGINT)
            else:
                self.on_interrupt(self)

    def kill(self) -> None:
        self.exit(-signal.SIGKILL)

    def stop(self, grace_s: float = 5.0) -> None:
        self.interrupt()
        if not self._exited.wait(grace_s):
            self.kill()


class ChildSession(LiveSource):
    """The script in a child process (``python -m gpuwatch.profile.live.child``), its messages
    read from a pipe of their own and its output from its stdout and stderr, on threads."""

    def __init__(
        self,
        target: Target,
        options: ProfileOptions,
        interval_s: float = 0.25,
        outputs: Sequence[Output] = (),
        gpu_stats: str = "off",
        python: str = sys.executable,
        cwd: str | None = None,
    ) -> None:
        super().__init__(target, options)
        self.interval_s = interval_s
        self.outputs = list(outputs)
        self.gpu_stats = gpu_stats
        self.python = python
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []

    @property
    def started(self) -> bool:
        return self.process is not None

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        config = {
            "fd": write_fd,
            "parent_pid": os.getpid(),
            "interval_s": self.interval_s,
            "target": self.target.name,
            "args": list(self.target.args),
            "module": self.target.module,
            "options": self.options.to_json(),
            "outputs": [(o.kind, o.path, o.where) for o in self.outputs],
            "gpu_stats": self.gpu_stats,
        }
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [self.python, "-m", "gpuwatch.profile.live.child", json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        )
        os.close(write_fd)
        self.attach(self.process, os.fdopen(read_fd, "rb"))

    def attach(self, process: subprocess.Popen[bytes], messages: IO[bytes]) -> None:
        """Reads ``process``'s output and the ``messages`` pipe on threads of their own, and
        waits for its end on another (:meth:`start` does this; tests attach any process)."""
        self.process = process
        self.pid = process.pid
        assert process.stdout is not None and process.stderr is not None
        self._spawn(self._read_messages, messages)
        self._spawn(self._read_output, process.stdout, "stdout")
        self._spawn(self._read_output, process.stderr, "stderr")
        readers = list(self._threads)
        OwnThread(
            target=self._watch_exit, args=(process, readers), name="gpuwatch-live-exit", daemon=True
        ).start()

    def _spawn(self, fn: Callable[..., object], *args: object) -> None:
        t = OwnThread(target=fn, args=args, name=f"gpuwatch-live-{fn.__name__}", daemon=True)
        t.start()
        self._threads.append(t)

    def _watch_exit(
        self, process: subprocess.Popen[bytes], readers: list[threading.Thread]
    ) -> None:
        """Sets :attr:`finished_reading` once the process has exited and its pipes are read to
        their end, or PIPE_GRACE_S after its exit (a lingering grandchild may hold the pipes open
        for hours: the script's own process is what ends the run)."""
        process.wait()
        deadline = time.monotonic() + PIPE_GRACE_S
        for t in readers:
            t.join(max(0.0, deadline - time.monotonic()))
        self._finish()

    def _read_messages(self, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in pipe:
                text = raw.decode("utf-8", errors="replace").rstrip("\n")
                if not text:
                    continue
                try:
                    self.post(decode(text))
                except ProtocolError as exc:
                    self.post(f"malformed message from the child: {exc}")

    def _read_output(self, pipe: IO[bytes], name: str) -> None:
        """Splits the child's output into lines as it comes (not only at newlines): text after a
        carriage return (tqdm's progress bars) is the stream's current progress line, shown
        live; a line longer than MAX_LINE_CHARS keeps its head and counts the rest."""
        read = getattr(pipe, "read1", pipe.read)  # what has arrived, without waiting for more
        head = bytearray()
        extra = 0  # bytes of the current line beyond what is kept
        with pipe:
            while True:
                try:
                    chunk = read(65536)
                except (OSError, ValueError):
                    break
                if not chunk:
                    break
                start = 0
                while start < len(chunk):
                    nl = chunk.find(b"\n", start)
                    cr = chunk.find(b"\r", start)
                    stop = min(i for i in (nl, cr, len(chunk)) if i >= 0)
                    piece = chunk[start:stop]
                    room = MAX_LINE_CHARS - len(head)
                    if room > 0:
                        head += piece[:room]
                    extra += max(0, len(piece) - max(room, 0))
                    if stop == len(chunk):
                        # No end of line yet: what there is so far shows as progress.
                        if head:
                            self._show_progress(name, self._text(head, extra))
                        break
                    if chunk[stop : stop + 1] == b"\r" and chunk[stop + 1 : stop + 2] != b"\n":
                        if head:  # a progress bar redrawing its line
                            self._show_progress(name, self._text(head, extra))
                        head, extra = bytearray(), 0
                        start = stop + 1
                        continue
                    if not head and not extra and self._progress.get(name):
                        # "\r...\r\n" or "...\r" then "\n": the bar's last state is the line.
                        self._put(name, self._progress.pop(name))
                    else:
                        self._progress.pop(name, None)
                        self._put(name, self._text(head, extra))
                    head, extra = bytearray(), 0
                    start = stop + (2 if chunk[stop : stop + 2] == b"\r\n" else 1)
            if head or extra:
                self._put(name, self._text(head, extra))
            if self._progress.pop(name, None) is not None:
                self.arrived.set()

    @staticmethod
    def _text(head: bytearray, extra: int) -> str:
        text = bytes(head).decode("utf-8", errors="replace")
        if extra:
            text += f" … [{extra:,} more bytes of this line not shown]"
        return text

    @property
    def returncode(self) -> int | None:
        if self.process is None:
            return None
        return self.process.poll()

    def interrupt(self) -> None:
        self.stop_requested = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def stop(self, grace_s: float = 5.0) -> None:
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
