"""The state of one ``gpuwatch profile --live`` run, apart from its view: :class:`LiveRun`
posts :class:`Update` events to the view; the ``final`` one asks it to call :meth:`LiveRun.end`,
which builds the report (the child's own, or a partial one from the last snapshot) and writes it
exactly once.

NB: the report files are written on the view's thread, when it draws the end: a report file on
disk then means the view has the end in hand and ``q`` quits at once. Written from the pump, a
loaded machine could show the file long before the view catches up, and a terminal closed in
that gap stalls Textual's next redraw for good (tests/test_live_shutdown.py). Nothing here
imports Textual: tests feed a run protocol messages and assert its state.

Threads: the session's readers set ``session.arrived`` when anything comes; one pump thread here
waits on it, drains, and posts at most one update every :data:`UPDATE_GAP_S` (a quiet child
costs nothing, a chatty one cannot flood the view). One lock guards the state, which the view's
thread also changes (GPU samples) and reads.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuwatch.analysis.energy import points_from_rows, rows_energy, rows_read_interval_ms
from gpuwatch.analysis.findings import Findings
from gpuwatch.analysis.profile import analysed
from gpuwatch.monitor.gpu_timeline import sample_row, used_gpu_indices
from gpuwatch.monitor.nvml.samples import GpuSample
from gpuwatch.output.write import Output, write_reports
from gpuwatch.profile.finish import GpuMeasures, finish
from gpuwatch.profile.live.protocol import (
    Done,
    Fatal,
    Hello,
    LiveSnapshot,
    Message,
    report_from_snapshot,
)
from gpuwatch.profile.live.result import LiveResult
from gpuwatch.profile.live.session import LiveSource
from profilers import Report
from profilers.registry import OwnThread
from profilers.report import printable

#: The least time between two updates posted while the script runs (at most ten a second).
UPDATE_GAP_S = 0.1
#: Lines of output one update carries while the script runs; the last one takes what is left.
LINES_PER_UPDATE = 500
LINES_AT_END = 10_000
#: Seconds the script gets to stop (and send its report) after Ctrl-C before it is killed.
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Update:
    """What arrived since the last update."""

    lines: list[tuple[str, str]]
    """``(stream, text)``, stream ``"stdout"`` or ``"stderr"``."""
    problems: list[str]
    """Malformed messages from the child, one line each."""
    snapshots: list[LiveSnapshot]
    """The snapshots that came, oldest first (the newest is the run now)."""
    progress: str
    """The child's current progress line (tqdm's bar), ``""`` for none."""
    final: bool = False
    """The last update: the child has exited and these are the last lines it left; the view
    calls :meth:`LiveRun.end` once it has drawn it."""


@dataclass(frozen=True)
class Ended:
    """The run has ended: its report is built and written (``fatal``: it never started)."""

    exit_code: int
    report: Report | None
    written: list[tuple[bool, str]]
    """``(ok, message)`` per report file."""
    fatal: str | None


def _nowhere(update: Update) -> None:
    """Where events go before :meth:`LiveRun.start` names a view."""


class LiveRun:
    """One profiled child seen live: its state, its end, its report (written to ``outputs``
    however it ends). ``session``: a child process (started by :meth:`start` unless already) or
    a script in memory; ``gpu_stats``: the report's ``options.gpu_stats`` (``Sampler.source``)."""

    def __init__(
        self,
        session: LiveSource,
        outputs: Sequence[Output] = (),
        gpu_stats: str = "off",
        clock: Callable[[], float] = time.monotonic,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.session = session
        self.outputs = list(outputs)
        self.gpu_stats = gpu_stats
        self.clock = clock
        self.stop_grace_s = stop_grace_s
        self.started_at: float | None = None
        self.hello: Hello | None = None
        self.last_snapshot: LiveSnapshot | None = None
        self.snapshots_seen = 0
        self.done: Done | None = None
        self.fatal: str | None = None
        self.problems: list[str] = []
        self.profile_t0: float | None = None
        """The child's profile start, on :attr:`clock` (the GPU samples' time zero)."""
        self.gpu_samples: deque[dict[str, object]] = deque(maxlen=172_800)
        self.signalled: int | None = None
        """SIGTERM or SIGHUP that closed gpuwatch (the exit code is then 128 + it)."""
        self.report: Report | None = None
        self.findings: Findings | None = None
        """The report's analysis, worked out once when it ends (None: it failed, or no end)."""
        self.written: list[tuple[bool, str]] = []
        self.exit_code: int | None = None
        """Not None once the run is over and its report built (its files are written under the
        lock that :meth:`close` takes)."""
        self._ended_at: float | None = None
        self._post: Callable[[Update], None] = _nowhere
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.mig_gpus: dict[str, int] = {}
        """The MIG slices' parent GPUs, as the view's sampler learned them (learn_mig_gpus)."""
        self._kill_timer: threading.Timer | None = None
        self._steps_seen: deque[tuple[int, float, float]] = deque([(-1, 0.0, 0.0)], maxlen=8)

    @property
    def ended(self) -> bool:
        return self.exit_code is not None

    @property
    def pid(self) -> int | None:
        """The script's process, as the child said in its hello (its process until then)."""
        return self.hello.pid if self.hello is not None else self.session.pid

    @property
    def command(self) -> str:
        """The user's command, printable."""
        return printable(" ".join(self.session.target.command))

    def elapsed_s(self) -> float:
        """Seconds since the run started, stopped when it ended."""
        if self.started_at is None:
            return 0.0
        return (self._ended_at if self._ended_at is not None else self.clock()) - self.started_at

    def how_it_ended(self) -> str:
        """``exited with 3``, ``killed by SIGKILL``, ... (``running`` until it has)."""
        return LiveSource.describe_exit(self.session.returncode)

    def state(self) -> str:
        """``running``, ``stopping…``, ``ended: exited with 0 (partial report)``, ..."""
        if self.exit_code is None:
            return "stopping…" if self.session.stop_requested else "running"
        if self.fatal is not None:
            return f"could not start: {self.fatal}"
        state = f"ended: {self.how_it_ended()}"
        if self.report is not None and self.report.partial:
            state += " (partial report)"
        return state

    def used_gpus(self, devices: list[dict[str, object]]) -> set[int] | None:
        """The GPUs the script uses (None: no telling which, as with MIG slices the view has
        not mapped: ``mig_gpus``)."""
        with self._lock:
            return used_gpu_indices(devices, self.gpu_samples, self.mig_gpus)

    def step_energy(self) -> tuple[int, float, bool] | None:
        """The newest step seen whose energy the view's GPU samples cover: (step, J on the GPUs
        the script uses, whether it is shorter than the samples' gap: then the mean power
        around it times its length); None before one is (gpuwatch/analysis/energy.py)."""
        with self._lock:
            snap = self.last_snapshot
            used = used_gpu_indices(snap.devices, self.gpu_samples, self.mig_gpus) if snap else None
            if not used:
                return None
            tail = list(itertools.islice(reversed(self.gpu_samples), 64 * len(used)))[::-1]
            for step, a, b in reversed(self._steps_seen):
                got = rows_energy((r for r in tail if r["gpu"] in used), used, a, b)
                if step >= 0 and got is not None:
                    return step, got[0], got[1]
        return None

    def start(self, post: Callable[[Update], None] = _nowhere) -> None:
        """Starts the child (unless already started) and the pump that posts to ``post``
        (from its own thread)."""
        self._post = post
        if not self.session.started:
            self.session.start()
        self.started_at = self.clock()
        self._pump_thread = OwnThread(target=self._pump, name="gpuwatch-live-pump", daemon=True)
        self._pump_thread.start()

    def take(self, messages: Sequence[Message]) -> list[LiveSnapshot]:
        """Keeps what the child said; returns the snapshots among it."""
        fresh = []
        with self._lock:
            for msg in messages:
                if isinstance(msg, Hello):
                    self.hello = msg
                    self.profile_t0 = self.clock()  # the profile starts right after
                elif isinstance(msg, LiveSnapshot):
                    fresh.append(msg)
                    if self.last_snapshot is None:  # the child's clock: elapsed since the start
                        self.profile_t0 = self.clock() - msg.elapsed_s
                    self.last_snapshot = msg
                    self.snapshots_seen += 1
                    if "end_ms" in msg.time and msg.time["step"] != self._steps_seen[-1][0]:
                        self._steps_seen.append(
                            (msg.time["step"], msg.time["start_ms"], msg.time["end_ms"])
                        )
                elif isinstance(msg, Done):
                    self.done = msg
                elif isinstance(msg, Fatal):
                    self.fatal = msg.error
        return fresh

    def drain(self, max_lines: int = LINES_PER_UPDATE, final: bool = False) -> Update:
        """Takes what the session has read since the last drain."""
        with self._lock:
            drained = self.session.drain(max_lines=max_lines)
            fresh = self.take(drained.messages)
            self.problems.extend(drained.problems)
            progress = "" if self.exit_code is not None else self.session.progress()
            return Update(drained.lines, drained.problems, fresh, progress, final)

    def _pump(self) -> None:
        arrived = self.session.arrived
        while True:
            arrived.wait()
            if self._closing.is_set():
                return
            arrived.clear()
            # NB: read before draining: once the pipes are read to their end, this drain
            # holds every message and line that is left.
            finished = self.session.finished_reading
            update = self.drain(LINES_AT_END if finished else LINES_PER_UPDATE, final=finished)
            self._post(update)
            if finished:
                return  # the view ends the run (end()) once it has drawn this last update
            if self.session.lines_pending:
                arrived.set()  # more than one update's lines came: the next one takes them
            if self._closing.wait(UPDATE_GAP_S):
                return

    def record_gpus(self, gpus: Sequence[GpuSample]) -> None:
        """GPU samples taken while the script runs, for its report."""
        # NB: the report's GPU samples share the profile's clock (its events' t is seconds
        # since the profile started, not since the child was spawned) and stop with the script.
        with self._lock:
            t0 = self.profile_t0
            if t0 is None or self.done is not None or self.exit_code is not None:
                return
            t = round(self.clock() - t0, 3)
            pids = (self.pid,) if self.pid is not None else ()
            self.gpu_samples.extend(sample_row(t, g, pids) for g in gpus)

    def end(self) -> Ended | None:
        """Decides the exit code and writes the report, once (None when already ended)."""
        with self._lock:
            if self.exit_code is not None:
                return None
            self._ended_at = self.clock()
            self._cancel_kill()
            if self.done is not None:
                code = self.done.exit_code
                report = Report.from_dict(self.done.report)
            elif self.fatal is not None:
                self.exit_code = 2
                return Ended(2, None, [], self.fatal)
            else:
                exit_code = self.session.exit_code
                code = exit_code if exit_code is not None else 1
                report = report_from_snapshot(
                    self.last_snapshot,
                    [printable(c) for c in self.session.target.command],
                    code,
                    f"the script's process ended without a report: {self.how_it_ended()}",
                )
            if self.signalled is not None and report.partial:
                name = signal.Signals(self.signalled).name
                report = report.replace(error=f"stopped: gpuwatch received {name} ({report.error})")
            report = finish(report, self._measures())
            self.report = report
            # NB: ended before the files are written, as a user sees it: once a report file
            # exists, q quits at once (close() waits on this lock for the writing to finish).
            self.exit_code = code
            self.findings = analysed(report)
            self.written = write_reports(report, self.outputs, self.findings)
            return Ended(code, report, list(self.written), None)

    def _measures(self) -> GpuMeasures:
        """The view's GPU samples, and the energy per step from them (at the stats' interval:
        coarser than a plain run's 20 ms reads of the counter, and said so by
        ``read_interval_ms``)."""
        rows = self.gpu_samples
        return GpuMeasures(
            self.gpu_stats, rows, self.mig_gpus, points_from_rows(rows), rows_read_interval_ms(rows)
        )

    def result(self) -> LiveResult:
        """What the run left (exit code 1 if it never ended, 128 + N after signal N)."""
        code = self.exit_code if self.exit_code is not None else 1
        if self.signalled is not None:
            code = 128 + self.signalled  # gpuwatch itself was stopped: say so, as a shell expects
        return LiveResult(
            code, self.report, list(self.written), self.fatal, self.signalled, self.findings
        )

    def note_signal(self, signum: int) -> None:
        """gpuwatch received SIGTERM or SIGHUP (the first one counts)."""
        if self.signalled is None:
            self.signalled = signum

    def stop(self) -> None:
        """Ctrl-C for the script (its report is kept); killed if still running after
        ``stop_grace_s``."""
        self.session.interrupt()
        with self._lock:
            self._cancel_kill()
            self._kill_timer = threading.Timer(self.stop_grace_s, self._kill_if_still_running)
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def _kill_if_still_running(self) -> None:
        if self.session.returncode is None:
            self.session.kill()

    def _cancel_kill(self) -> None:
        if self._kill_timer is not None:
            self._kill_timer.cancel()
            self._kill_timer = None

    def close(self) -> None:
        """The view is closing: a script still running is stopped (and killed after
        ``stop_grace_s``), and whatever report it sent is kept and written. Blocks until then."""
        self._closing.set()
        self.session.arrived.set()  # the pump wakes, and leaves
        if self.exit_code is None:
            self.session.stop(grace_s=self.stop_grace_s)
            with self._lock:
                if self.exit_code is None:  # the pump may have ended it meanwhile
                    self.drain(LINES_AT_END, final=True)
                    self.end()
        with self._lock:
            self._cancel_kill()
