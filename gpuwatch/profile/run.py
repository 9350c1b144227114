""":func:`run_profiled`, the one way a profile runs in this process (``gpuwatch profile``, the
``--live`` child). Whatever ends the run, the report is built exactly once:

* the script returns, raises, exits or is interrupted: after its non-daemon threads finished,
  with signals deferred while the report is written;
* ``os._exit(n)`` (fork-based loaders, launchers) waits for the report (a forked child's does not);
* ``os.exec*`` (a relauncher): the partial report, "replaced by exec", is out first;
* SIGKILL (the OOM killer) lets nothing run: ``checkpoint`` gets a partial report every
  ``checkpoint_s`` seconds while the script runs, and the last one stands.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, NoReturn

from gpuwatch.profile.finish import GpuMeasures, finish
from gpuwatch.profile.interrupts import Signals, Terminated
from gpuwatch.profile.options import ProfileOptions
from gpuwatch.profile.runner import Outcome, Target, importable_beside, run_target
from gpuwatch.profile.worded import warnings_worded
from profilers.registry import OwnThread
from profilers.report import Report, printable

if TYPE_CHECKING:
    from _typeshed import StrOrBytesPath

    from gpuwatch.monitor.gpu_timeline import TimelineSamples

__all__ = ["ProfileOptions", "ProfiledRun", "run_profiled"]

ReportSink = Callable[[Report], None]

#: The calls every ``os.exec*`` function ends in (os.execl -> execv, os.execvpe -> execve, ...).
EXEC_CALLS = ("execv", "execve")


def _can_exec(path: int | StrOrBytesPath) -> bool:
    """Whether exec of ``path`` can replace the process (an fd given to execve counts)."""
    if isinstance(path, int):
        return True
    try:
        return os.access(path, os.X_OK) and not os.path.isdir(path)
    except (TypeError, ValueError):
        return False  # exec itself says what is wrong with it


class ProfiledRun:
    """One profiled run of a target; ends once, from whichever path gets there first."""

    def __init__(
        self,
        target: Target,
        options: ProfileOptions,
        on_report: ReportSink,
        checkpoint: ReportSink | None,
        stop_gpu_timeline: Callable[[], TimelineSamples] | None,
        gpu_stats: str,
    ) -> None:
        self.target = target
        self.options = options
        self.on_report = on_report
        self.checkpoint = checkpoint
        self.stop_gpu_timeline = stop_gpu_timeline
        self.gpu_stats = gpu_stats
        self.pid = os.getpid()
        from gpuwatch.profile.ranks import distributed_rank

        self.rank: tuple[int | None, int | None] = distributed_rank() or (None, None)
        """(rank, world size) of a distributed run (RANK, WORLD_SIZE), else (None, None)."""
        self.fake = options.fake_gpus_harness()  # FakeCudaUnavailable: one line to show
        self.prof = options.profiler()
        self._end_lock = threading.Lock()
        self._started = False
        self._ended = False
        self._stop = threading.Event()
        self.signals = Signals()

    def report(self, exit_code: int, partial: bool, error: str | None) -> Report:
        """The report as the profiler has it now, with what this run knows of itself."""
        report = self.prof.report(
            command=[printable(c) for c in self.target.command],
            exit_code=exit_code,
            partial=partial,
        )
        report = report.replace(
            error=error,
            options=report.options.replace(gpu_stats=self.gpu_stats),
            rank=self.rank[0],
            world_size=self.rank[1],
        )
        return report if self.fake is None else self.fake.mark(report)

    def end(self, outcome: Outcome, note: str | None = None) -> None:
        """Builds the report and hands it on, once; later callers wait for the first."""
        with self._end_lock:
            if self._ended or os.getpid() != self.pid:
                return  # already done, or a forked child: the report is the parent's
            self._ended = True
            self._stop.set()
            report = self.report(
                outcome.exit_code, not outcome.finished, outcome.error if note is None else note
            )
            measures = None
            if self.stop_gpu_timeline is not None:
                measures = self._measures(self.stop_gpu_timeline())
            self.on_report(finish(report, measures))

    def _measures(self, taken: TimelineSamples) -> GpuMeasures:
        """The GPU timeline's samples, its energy changes moved onto the profile's clock."""
        origin = self.prof.time_origin_ns
        energy = None
        if origin is not None and self.fake is None:  # simulated GPUs' energy is nobody's
            shift_ms = taken.t0 * 1000.0 - origin / 1e6
            energy = {
                gpu: [(t * 1000.0 + shift_ms, mj) for t, mj in changes]
                for gpu, changes in taken.energy.items()
            }
        return GpuMeasures(self.gpu_stats, taken.rows, taken.mig_gpus, energy, taken.energy_read_ms)

    def _checkpoints(self) -> None:
        assert self.checkpoint is not None
        started = time.monotonic()
        while not self._stop.wait(self.options.checkpoint_s):
            elapsed = time.monotonic() - started
            report = self.report(
                137,
                True,
                f"the run did not end normally: this is its last checkpoint, {elapsed:.0f} s "
                "in; the process was killed before it could write more (exit code 137 assumes "
                "SIGKILL, as the OOM killer sends)",
            )
            with self._end_lock:
                if self._ended:
                    return
                try:
                    self.checkpoint(report)
                except Exception:  # a checkpoint that fails must not stop the script
                    continue

    @contextmanager
    def _os_exit_held(self) -> Iterator[None]:
        real_exit = os._exit

        def _exit(status: int) -> NoReturn:
            if os.getpid() == self.pid:
                try:
                    note = f"the script called os._exit({status})"
                    self.end(Outcome(int(status), True), note=note)
                except BaseException as exc:  # never keep the script from exiting
                    print(f"gpuwatch: error: could not write the report: {exc}", file=sys.stderr)
            real_exit(status)

        os._exit = _exit
        try:
            with self._exec_held():
                yield
        finally:
            os._exit = real_exit

    @contextmanager
    def _exec_held(self) -> Iterator[None]:
        """``os.execv``/``os.execve`` write the partial report first: nothing runs after."""
        real = {name: getattr(os, name) for name in EXEC_CALLS}

        def held(name: str) -> Callable[..., NoReturn]:
            def _exec(path: int | StrOrBytesPath, *rest: object) -> NoReturn:
                # NB: os.execvp tries each PATH entry through os.execv and goes on when one
                # fails: only a call that can succeed ends the run.
                if os.getpid() == self.pid and _can_exec(path):
                    try:
                        shown = path if isinstance(path, int) else printable(os.fsdecode(path))
                        note = f"replaced by exec: the script called os.{name}({shown!r}, ...)"
                        self.end(Outcome(0, False), note=note)
                        sys.stderr.flush()
                    except BaseException as exc:  # never keep the script from its exec
                        print(
                            f"gpuwatch: error: could not write the report: {exc}", file=sys.stderr
                        )
                real[name](path, *rest)
                raise AssertionError("unreachable: exec returns only by raising")

            return _exec

        for name in EXEC_CALLS:
            setattr(os, name, held(name))
        try:
            yield
        finally:
            for name, fn in real.items():
                setattr(os, name, fn)

    def run(self) -> int:
        outcome = Outcome(1, False, "gpuwatch stopped before the script started")
        with warnings_worded(), self.signals.raising():
            try:
                with self._os_exit_held():
                    if self.checkpoint is not None and self.options.checkpoint_s > 0:
                        OwnThread(
                            target=self._checkpoints, name="gpuwatch-checkpoint", daemon=True
                        ).start()
                    fake = self.fake if self.fake is not None else nullcontext()
                    inputs = (
                        importable_beside(self.target) if self.options.inputs else nullcontext()
                    )
                    with fake, inputs, self.prof:
                        self._started = True
                        try:
                            outcome = run_target(self.target)
                        except KeyboardInterrupt:  # a second Ctrl-C while the first was handled
                            outcome = Outcome(130, False, "KeyboardInterrupt")
                        except Terminated as exc:
                            outcome = Outcome(exc.exit_code, False, f"stopped by {exc}")
                        finally:
                            self.signals.deferring()
            finally:
                self.signals.deferring()
                try:
                    # NB: a fake GPU or a profiler that could not start raises on its way out
                    # (FakeCudaUnavailable: one line); there is no run to report on top of it.
                    if self._started:
                        self.end(outcome)
                finally:
                    self.signals.restore()
        received = self.signals.received
        if received and outcome.exit_code == 0:
            # The script had ended well when the signal came: its report says so, and the exit
            # code says that gpuwatch itself was stopped.
            return 128 + received[0]
        return outcome.exit_code


def run_profiled(
    target: Target,
    options: ProfileOptions,
    on_report: ReportSink,
    checkpoint: ReportSink | None = None,
    stop_gpu_timeline: Callable[[], TimelineSamples] | None = None,
    gpu_stats: str = "off",
) -> int:
    """Runs ``target`` under the profiler and hands its report to ``on_report`` once, whatever
    ends the run (``checkpoint``: a partial one every ``options.checkpoint_s`` seconds); returns
    the exit code a shell expects. ``gpu_stats``: ``"NVML"``, ``"demo"``, or why none."""
    return ProfiledRun(target, options, on_report, checkpoint, stop_gpu_timeline, gpu_stats).run()
